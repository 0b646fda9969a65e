"""`inhabit sandbox env-server` as a real process on 127.0.0.1, driven end to end by RemoteSandboxProvider.

Starts the command in a subprocess, waits (bounded) for it to answer, runs a rollout-shaped
sequence through the client, then stops it with SIGTERM and checks that shutdown closed every
sandbox and killed what ran inside. Also checks that it refuses a public host without a token.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from inhabit.sandbox.pool import SandboxPool
from inhabit.sandbox.remote import EnvServerLost, EnvServerUnauthorized, RemoteSandboxProvider

SRC = Path(__file__).resolve().parents[2] / "src"
# A process that leaves the exec's process group (setsid) and reports its pid only once it has,
# so the per-exec group kill cannot race it: only the sandbox's close can stop it.
ESCAPE_AND_REPORT_PID = (
    "setsid sh -c 'echo $$ > $TMPDIR/escaped.pid; exec sleep 60' > /dev/null 2>&1 < /dev/null & "
    "for i in $(seq 500); do [ -s $TMPDIR/escaped.pid ] && break; sleep 0.01; done; cat $TMPDIR/escaped.pid"
)
TOKEN = "cli-test-token-42"


ENV_SERVER = [sys.executable, "-m", "inhabit", "sandbox", "env-server"]
"""The command, as a user types it (`inhabit sandbox env-server`)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "INHABIT_ENV_TOKEN"}
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "tests").mkdir(parents=True)
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (ws / "tests" / "test_calc.py").write_text(
        "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"
    )
    return ws


@pytest.fixture
def server(tmp_path: Path):
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [
            *ENV_SERVER,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend",
            "process",
            "--root",
            str(tmp_path),
        ],
        env=_env(INHABIT_ENV_TOKEN=TOKEN),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # bounded: up to ~30 s on a busy 2-core machine
            if proc.poll() is not None:
                raise AssertionError(f"env-server exited early:\n{(tmp_path / 'server.log').read_text()}")
            try:
                if (
                    httpx.get(url + "/v1/health", headers={"Authorization": f"Bearer {TOKEN}"}).status_code
                    == 200
                ):
                    break
            except httpx.TransportError:
                pass
            import time

            time.sleep(0.1)
        else:
            raise AssertionError("env-server did not answer in time")
        yield url, proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        log.close()


async def test_end_to_end_through_the_command(server, workspace, tmp_path):
    url, proc = server
    prov = RemoteSandboxProvider(url, TOKEN)
    health = await prov.health()
    assert health.backend == "process" and health.sandboxes == 0

    sb = await prov.create(workspace)
    r = await sb.exec("python3 -m pytest -q -p no:cacheprovider", timeout_s=60)
    assert r.exit_code == 1 and "1 failed" in r.stdout
    pristine = await sb.snapshot()
    await sb.write_file("calc.py", (await sb.read_file("calc.py")).replace(b"a - b", b"a + b"))
    assert (await sb.exec("python3 -m pytest -q -p no:cacheprovider", timeout_s=60)).ok
    fixed = await sb.snapshot()
    await sb.restore(pristine)
    assert b"a - b" in await sb.read_file("calc.py")
    async with await prov.create(fixed) as graded:
        assert (await graded.exec("python3 -m pytest -q -p no:cacheprovider", timeout_s=60)).ok
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "x.txt").write_text("server-side\n")
    async with await prov.create("server:proj") as from_root:
        assert (await from_root.exec("cat x.txt")).stdout == "server-side\n"
    async with SandboxPool(prov, pristine, size=2) as pool, pool.acquire() as pooled:
        assert b"a - b" in await pooled.read_file("calc.py")

    with pytest.raises(EnvServerUnauthorized):
        await RemoteSandboxProvider(url, "wrong-token-0").health()

    pid = int((await sb.exec(ESCAPE_AND_REPORT_PID)).stdout)
    assert _alive(pid)
    await prov._http.aclose()  # vanish without closing: shutdown must clean up
    proc.send_signal(signal.SIGTERM)
    # uvicorn shuts down gracefully (lifespan closes every sandbox), then re-raises SIGTERM.
    assert proc.wait(30) in (0, -signal.SIGTERM)
    for _ in range(100):
        if not _alive(pid):
            break
        await asyncio.sleep(0.05)
    assert not _alive(pid)


@pytest.mark.parametrize("command", [["sandbox", "env-server"], ["env-server"]])  # the older spelling too
def test_refuses_a_public_host_without_a_token(command):
    r = subprocess.run(
        [sys.executable, "-m", "inhabit", *command, "--host", "0.0.0.0", "--port", str(_free_port())],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert "without a token" in r.stderr


def test_short_token_is_refused():
    r = subprocess.run(
        [
            *ENV_SERVER,
            "--port",
            str(_free_port()),
            "--token",
            "short",
        ],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0
    assert "token" in r.stderr


def test_missing_root_is_refused(tmp_path):
    r = subprocess.run(
        [
            *ENV_SERVER,
            "--port",
            str(_free_port()),
            "--root",
            str(tmp_path / "nope"),
        ],
        env=_env(INHABIT_ENV_TOKEN=TOKEN),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2
    assert "--root" in r.stderr and "not a directory" in r.stderr


async def test_sigterm_answers_an_exec_in_flight_with_503_and_a_typed_error(server, workspace, tmp_path):
    url, proc = server
    prov = RemoteSandboxProvider(url, TOKEN)
    sb = await prov.create(workspace)
    running = asyncio.create_task(sb.exec("sleep 30", timeout_s=60))
    for _ in range(300):  # bounded: until the exec is running on the server
        if any(s.active_requests for s in await prov.list_sandboxes()):
            break
        await asyncio.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    # Before: a plain-text 500 after the 10 s graceful timeout. Now: JSON 503 shutting_down at once.
    with pytest.raises(EnvServerLost, match="shutting down"):
        await asyncio.wait_for(running, 30)
    assert prov.losses == 1
    assert proc.wait(30) in (0, -signal.SIGTERM)
    assert "serving on" in (tmp_path / "server.log").read_text()
    await prov._http.aclose()


def test_a_taken_port_is_one_clear_error_before_anything_starts():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = subprocess.run(
            [
                *ENV_SERVER,
                "--port",
                str(port),
                "--backend",
                "process",
            ],
            env=_env(INHABIT_ENV_TOKEN=TOKEN),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "serving" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
