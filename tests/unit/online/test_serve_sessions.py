"""`inhabit serve --follow STORE --sessions DB`: requests with X-Inhabit-Session become sessions
(token ids, engine logprobs, versions), clients rate them over HTTP, and a version published to the
store is swapped in while requests keep succeeding."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest

from inhabit.online.store import SessionStore

from .conftest import free_port, wait_healthy

SRC = Path(__file__).resolve().parents[3] / "src"


@pytest.mark.slow
def test_serve_records_sessions_and_follows_the_weight_store(tiny_folder, tmp_path: Path) -> None:
    from inhabit.models.loading import load_model
    from inhabit.weights.publish import Publisher, PublisherConfig

    model, _ = load_model(tiny_folder)
    weights, db = tmp_path / "weights", tmp_path / "sessions.db"
    pub = Publisher(str(weights), PublisherConfig(dtype="float32"))
    pub.publish(model.state_dict(), version=0)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inhabit",
            "serve",
            "--model",
            str(tiny_folder),
            "--port",
            str(port),
            "--follow",
            str(weights),
            "--sessions",
            str(db),
            "--set",
            "follow_poll_s=0.2",
        ],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_healthy(url, proc)
        body = {
            "model": "dense-1m",
            "messages": [{"role": "user", "content": "fix calc.py"}],
            "max_tokens": 8,
            "temperature": 1.0,
        }
        with httpx.Client(base_url=url, timeout=60) as http:
            for _ in range(2):
                r = http.post("/v1/chat/completions", json=body, headers={"X-Inhabit-Session": "conv-7"})
                assert r.status_code == 200, r.text
            assert http.post("/v1/chat/completions", json=body).status_code == 200  # no header: not recorded
            r = http.post("/v1/sessions/conv-7/signals", json={"kind": "rating", "value": 1, "note": "good"})
            assert r.status_code == 200, r.text
            assert http.post("/v1/sessions/nope/signals", json={}).status_code == 404

            # Requests keep flowing while a new version is published and swapped in.
            failures: list[str] = []
            stop = threading.Event()

            def load() -> None:
                while not stop.is_set():
                    resp = http.post("/v1/chat/completions", json=body)
                    if resp.status_code != 200:
                        failures.append(resp.text)

            worker = threading.Thread(target=load)
            worker.start()
            state = {k: v + 0.01 for k, v in model.state_dict().items()}
            pub.publish(state, version=1)
            for _ in range(300):
                if http.get("/health").json()["version"] == 1:
                    break
                threading.Event().wait(0.1)
            stop.set()
            worker.join()
            assert http.get("/health").json()["version"] == 1
            assert failures == []
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    store = SessionStore(db)
    (row,) = store.sessions()
    assert row.id == "conv-7" and row.source == "serve" and row.version == 0
    assert [(s.kind, s.value, s.note) for s in row.signals] == [("rating", 1.0, "good")]
    turns = store.record("conv-7")["trajectory"]["segments"][0]["turns"]
    assert len(turns) == 2
    for t in turns:
        assert len(t["completion_token_ids"]) == len(t["logprobs"]) == len(t["versions"]) > 0
        assert t["prompt_token_ids"] and all(v == 0 for v in t["versions"])
