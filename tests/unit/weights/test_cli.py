"""The operator CLI: serve a store over HTTP, pull a version into safetensors, verify, log."""

from __future__ import annotations

import logging
from pathlib import Path

from safetensors.torch import load_file
from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.weights.publish import Publisher, PublisherConfig
from inhabit.weights.serve import StoreServer

from .conftest import assert_same_weights


def _publish(root: Path, versions, n: int) -> None:
    pub = Publisher(str(root), PublisherConfig(full_every=3, shard_bytes=200_000))
    for state in versions[:n]:
        pub.publish(state)


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def test_pull_over_http_from_served_store(tmp_path, versions):
    root = tmp_path / "store"
    _publish(root, versions, 5)
    server = StoreServer(str(root), host="127.0.0.1", port=0).start()
    seen = _Records()
    logging.getLogger("inhabit.weights").addHandler(seen)
    try:
        runner = CliRunner()
        out = tmp_path / "out"
        result = runner.invoke(app, ["weights", "pull", server.url, "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "version 4" in result.output
        assert_same_weights(load_file(str(out / "model.safetensors")), versions[4])
        result = runner.invoke(
            app, ["weights", "pull", server.url, "--out", str(tmp_path / "o2"), "--version", "1"]
        )
        assert result.exit_code == 0, result.output
        assert_same_weights(load_file(str(tmp_path / "o2" / "model.safetensors")), versions[1])
        # A served store is read-only: a pull takes no lease there, and warns of nothing.
        assert [r.getMessage() for r in seen.records if r.levelno >= logging.WARNING] == []
    finally:
        logging.getLogger("inhabit.weights").removeHandler(seen)
        server.close()


def test_server_is_read_only_and_confined(tmp_path, versions):
    import httpx

    root = tmp_path / "store"
    _publish(root, versions, 1)
    (tmp_path / "secret.txt").write_text("no")
    server = StoreServer(str(root)).start()
    try:
        assert httpx.get(f"{server.url}/LATEST").text.strip() == "0"
        assert httpx.put(f"{server.url}/LATEST", content=b"9").status_code == 405
        assert httpx.get(f"{server.url}/../secret.txt").status_code in (403, 404)
        assert httpx.get(f"{server.url}/%2e%2e/secret.txt").status_code in (403, 404)
    finally:
        server.close()


def test_verify_and_log(tmp_path, versions):
    root = tmp_path / "store"
    _publish(root, versions, 4)
    runner = CliRunner()
    ok = runner.invoke(app, ["weights", "verify", str(root), "--deep"])
    assert ok.exit_code == 0, ok.output
    log = runner.invoke(app, ["weights", "log", str(root)])
    assert log.exit_code == 0 and "delta" in log.output and "full" in log.output
    shard = root / "v000000000002" / "shard-00000.bin"
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x40
    shard.write_bytes(bytes(data))
    bad = runner.invoke(app, ["weights", "verify", str(root)])
    assert bad.exit_code == 1 and "checksum" in bad.output
    assert runner.invoke(app, ["weights", "verify", str(root), "--version", "1"]).exit_code == 0


def test_serve_command_in_a_real_process(tmp_path, versions):
    import os
    import subprocess
    import sys

    from inhabit.weights.subscribe import Subscriber

    root = tmp_path / "store"
    _publish(root, versions, 2)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3] / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "inhabit", "weights", "serve", str(root), "--port", "0"],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        line = proc.stderr.readline()
        assert "serving" in line, line
        url = line.split(" at ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        sub = Subscriber(url)
        assert sub.sync().version == 1
        assert_same_weights(sub.state_dict(), versions[1])
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def test_pull_from_an_empty_store_is_a_clear_error(tmp_path):
    import subprocess
    import sys

    env_path = str(Path(__file__).resolve().parents[3] / "src")
    (tmp_path / "empty").mkdir()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "inhabit",
            "weights",
            "pull",
            str(tmp_path / "empty"),
            "--out",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 2 and "no published version" in proc.stderr
