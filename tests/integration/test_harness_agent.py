"""`inhabit agent` against a small OpenAI-compatible server that the test starts on 127.0.0.1.

The server is the test's own input: a FastAPI app answering chat completions from a script (and
failing the first request with a 503, which the OpenAIPolicy must retry through).
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from inhabit.harness.parse import render_call
from inhabit.serving import BackgroundServer

SRC = Path(__file__).resolve().parents[2] / "src"
# process by default; INHABIT_HARNESS_TEST_BACKEND=bwrap runs the same tests isolated.
BACKEND = os.environ.get("INHABIT_HARNESS_TEST_BACKEND", "process")

SCRIPT = [
    render_call("read_file", {"path": "calc.py"}),
    "The bug is in add.\n"
    + render_call(
        "edit_file",
        {"path": "calc.py", "old": "return a - b\n\n\ndef sub", "new": "return a + b\n\n\ndef sub"},
    ),
    render_call("finish", {"message": "add now adds"}),
]


class ScriptedServer:
    def __init__(self, script: list[str]) -> None:
        self.script = list(script)
        self.requests: list[dict] = []
        self.failed_once = False
        app = FastAPI()

        @app.get("/v1/models")
        def models() -> dict:
            return {
                "object": "list",
                "data": [{"id": "scripted", "object": "model", "created": 0, "owned_by": "test"}],
            }

        @app.post("/v1/chat/completions")
        def chat(body: dict) -> JSONResponse:
            if not self.failed_once:
                self.failed_once = True
                return JSONResponse({"error": {"message": "warming up"}}, status_code=503)
            self.requests.append(body)
            text = self.script.pop(0) if self.script else render_call("finish", {"message": "out of script"})
            prompt_chars = sum(len(m["content"]) for m in body["messages"])
            return JSONResponse(
                {
                    "id": f"c{len(self.requests)}",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt_chars // 4,
                        "completion_tokens": len(text) // 4,
                        "total_tokens": 0,
                    },
                }
            )

        self.app = app


@pytest.fixture
def server() -> Iterator[tuple[ScriptedServer, str]]:
    scripted = ScriptedServer(SCRIPT)
    with BackgroundServer(scripted.app) as server:
        yield scripted, f"{server.url}/v1"


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "myrepo"
    root.mkdir()
    (root / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n")
    return root


def agent(repo: Path, url: str, *extra: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "inhabit",
            "agent",
            "--repo",
            str(repo),
            "--model",
            url,
            "--task",
            "Fix add.",
            "--sandbox",
            BACKEND,
            *extra,
        ],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC), "XDG_CACHE_HOME": str(repo.parent / "cache")},
        timeout=120,
    )


def session(repo: Path) -> dict:
    """The one session saved for `repo`: under the user's cache, keyed by a hash, never in the repo."""
    (path,) = list((repo.parent / "cache" / "inhabit" / "repos").glob("*/sessions/*.json"))
    assert path.parent.parent.name == hashlib.sha256(str(repo.resolve()).encode()).hexdigest()[:16]
    assert not (repo / ".inhabit").exists()
    return json.loads(path.read_text())


def test_agent_applies_the_diff_with_yes_and_saves_the_session(server, repo: Path) -> None:
    scripted, url = server
    out = agent(repo, url, "--yes")
    assert out.returncode == 0, out.stderr
    assert (repo / "calc.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    assert "turn 1" in out.stdout and "read_file" in out.stdout and "+    return a + b" in out.stdout
    rec = session(repo)
    assert rec["decision"] == "accepted" and rec["changed_files"] == [{"path": "calc.py", "kind": "modified"}]
    traj = rec["trajectory"]
    assert traj["status"] == "finished" and traj["final_message"] == "add now adds"
    assert [c["tool"] for c in traj["tool_calls"]] == ["read_file", "edit_file", "finish"]
    # The endpoint saw the system prompt, the task, and the observation of the first call.
    first, second = scripted.requests[0], scripted.requests[1]
    assert first["model"] == "scripted" and "<tool name=" in first["messages"][0]["content"]
    assert "Fix add." in first["messages"][1]["content"]
    assert "1\tdef add(a, b):" in second["messages"][-1]["content"]


@pytest.mark.parametrize("answer", ["n\n", ""], ids=["no", "no-answer"])
def test_agent_leaves_the_repo_untouched_when_the_diff_is_rejected(server, repo: Path, answer: str) -> None:
    _, url = server
    before = (repo / "calc.py").read_text()
    out = agent(repo, url, stdin=answer)
    assert out.returncode == 0, out.stderr
    assert (repo / "calc.py").read_text() == before
    assert "Apply these changes" in out.stdout
    rec = session(repo)
    assert rec["decision"] == "rejected" and "+    return a + b" in rec["diff"]


def test_agent_with_an_unreachable_endpoint_is_an_error_of_the_command(repo: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    out = agent(repo, f"http://127.0.0.1:{port}/v1", "--yes", "--model-name", "m", "max_turns=2")
    assert out.returncode == 1, out.stderr
    assert f"error: cannot connect to http://127.0.0.1:{port}/v1" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (repo / ".inhabit").exists()  # nothing in the repository
    assert not (repo.parent / "cache").exists()  # no session: nothing happened
