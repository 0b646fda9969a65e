"""`inhabit serve` as a user runs it: a subprocess on 127.0.0.1 answering the OpenAI API."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx

SRC = Path(__file__).resolve().parents[3] / "src"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_inhabit_serve_answers_and_stops(moe_folder):
    port = _free_port()
    env = os.environ | {"PYTHONPATH": str(SRC)}
    cmd = [sys.executable, "-m", "inhabit", "serve", "--model", str(moe_folder), "--port", str(port),
           "--api-key", "secret", "--served-model-name", "tiny", "--set", "engine.max_batch_size=4", "--set", "engine.stop_at_eos=false"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(720):  # up to 3 minutes: the machine may be busy
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            time.sleep(0.25)
        headers = {"authorization": "Bearer secret"}
        assert httpx.get(url + "/v1/models").status_code == 401
        models = httpx.get(url + "/v1/models", headers=headers).json()
        assert models["data"][0]["id"] == "tiny"
        body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        r = httpx.post(url + "/v1/chat/completions", json=body, headers=headers, timeout=60)
        assert r.status_code == 200 and len(r.json()["choices"][0]["token_ids"]) <= 3
        # A request in flight at SIGTERM answers 503 JSON at once (not a bare 500 after 10 s).
        long = body | {"max_tokens": 4000}
        answer: list[httpx.Response] = []
        waiter = threading.Thread(
            target=lambda: answer.append(
                httpx.post(url + "/v1/chat/completions", json=long, headers=headers, timeout=120)
            )
        )
        waiter.start()
        for _ in range(600):  # bounded: until the engine runs it
            if httpx.get(url + "/v1/engine/stats", headers=headers).json()["running"]:
                break
            time.sleep(0.05)
        proc.terminate()
        waiter.join(120)
        assert answer[0].status_code == 503 and answer[0].json()["error"]["type"] == "server_error"
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    out = proc.stdout.read().decode() if proc.stdout else ""
    assert "serving" in out
    assert "dtype float32 (auto:" in out  # the start-up line states the dtype `auto` chose, and why
    assert "Loading weights" not in out and "it/s]" not in out, out  # no third-party progress bars


def test_a_taken_port_is_one_clear_error_before_the_model_loads(moe_folder):
    env = os.environ | {"PYTHONPATH": str(SRC)}
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        cmd = [sys.executable, "-m", "inhabit", "serve", "--model", str(moe_folder), "--port", str(port)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "Traceback" not in out.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in out.stderr
    assert "serving" not in out.stderr and "Loading" not in out.stderr  # it stopped before loading
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_bad_serve_config_is_one_clean_error(tmp_path):
    env = os.environ | {"PYTHONPATH": str(SRC)}
    cmd = [
        sys.executable,
        "-m",
        "inhabit",
        "serve",
        "--model",
        str(tmp_path),
        "--set",
        "engine.max_batch_size=0",
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "max_batch_size" in out.stderr and "Traceback" not in out.stderr
