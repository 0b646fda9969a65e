"""Every bad input to `inhabit` ends in one clear line and a non-zero exit: one table, one check.

Each case runs `python -m inhabit ...` as a subprocess and asserts that it
  * exits with the case's code (2: bad input, 1: the command could not do its work);
  * prints exactly one line on stderr besides log records (WARNING and below: the process
    sandbox's warning, say), and that line is `error: ...` with the case's text in it;
  * prints no Traceback anywhere;
  * writes nothing: none of the case's output paths exist afterwards, and the one file every case
    can see (`{file}`) is unchanged.

Arguments are format strings over the context below (`{tmp}`, `{down}`, ...). The servers are
the test's own inputs: `{down}` is a loopback port nothing listens on, `{openai}` a small
OpenAI-compatible endpoint that serves the model "served" to the key "right-key" only, and
`{taken}` a port this test holds. Add a case by appending to CASES.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from inhabit.serving import BackgroundServer

ROOT = Path(__file__).resolve().parents[2]
TASKS = ROOT / "examples" / "tasks"


@dataclass(frozen=True)
class Case:
    id: str
    args: tuple[str, ...]
    expect: str
    """Text the error line must contain."""
    code: int = 2
    not_written: tuple[str, ...] = ()
    """Paths (format strings) that must not exist afterwards."""
    forbid: str | None = None
    """Text that must not appear on stderr (a misleading message the command used to print)."""


AGENT = ("agent", "--repo", "{repo}", "--task", "fix it", "--yes", "--sandbox", "process")
EVAL = ("eval", "--tasks", str(TASKS), "--out", "{tmp}/ev/eval.json", "--backend", "process")

CASES = [
    # the root command
    Case("log-level-bogus", ("--log-level", "BOGUS", "version"), "--log-level"),
    Case("unknown-option", ("--no-such-option",), "No such option"),
    # a policy that cannot be used: an error of the command, nothing recorded
    Case("agent-server-down", (*AGENT, "--model", "{down}/v1"), "cannot connect to", 1, ("{repo}/.inhabit",)),
    Case("agent-wrong-model", (*AGENT, "--model", "{openai}/v1", "--model-name", "nope", "--api-key", "right-key"),
         "does not exist", 1, ("{repo}/.inhabit",)),
    Case("agent-missing-key", (*AGENT, "--model", "{openai}/v1", "--model-name", "served"),
         "refused the API key", 1, ("{repo}/.inhabit",)),
    Case("eval-turn-tokens-too-few", (*EVAL, "--model", "{down}/v1", "--max-turn-tokens", "8"),
         "--max-turn-tokens", 2, ("{tmp}/ev",), forbid="Traceback"),
    Case("eval-server-down", (*EVAL, "--model", "{down}/v1"), "cannot connect to", 1, ("{tmp}/ev",)),
    Case("eval-wrong-model", (*EVAL, "--model", "{openai}/v1", "--served-model", "nope", "--api-key", "right-key"),
         "does not exist", 1, ("{tmp}/ev",)),
    Case("eval-missing-key", (*EVAL, "--model", "{openai}/v1", "--served-model", "served"),
         "refused the API key", 1, ("{tmp}/ev",)),
    # inhabit specialize: inputs that cannot work are refused before any work, nothing written
    Case("specialize-no-repo", ("specialize", "{tmp}/nope", "--model", "{tmp}", "--out", "{tmp}/sp"),
         "does not exist", 2, ("{tmp}/sp",)),
    Case("specialize-model-file", ("specialize", "{repo}", "--model", "{file}", "--out", "{tmp}/sp"),
         "is a file but not a .gguf", 2, ("{tmp}/sp",)),
    Case("specialize-out-in-repo", ("specialize", "{repo}", "--model", "{tmp}", "--out", "{repo}/run"),
         "lies inside REPO", 2, ("{repo}/run",)),
    Case("specialize-bad-budget", ("specialize", "{repo}", "--model", "{tmp}", "--budget", "soon"),
         "--budget", 2, ("{tmp}/runs",)),
    Case("specialize-resume-nothing", ("specialize", "{repo}", "--model", "{tmp}", "--out", "{tmp}/sp", "--resume"),
         "no run to resume", 2),
    # weight stores that are not there
    Case("weights-verify-missing", ("weights", "verify", "{tmp}/no-store"), "no weight store at"),
    Case("weights-log-missing", ("weights", "log", "{tmp}/no-store"), "no weight store at"),
    Case("weights-gc-missing", ("weights", "gc", "{tmp}/no-store"), "no weight store at", 2, ("{tmp}/no-store",)),
    Case("weights-serve-missing", ("weights", "serve", "{tmp}/no-store", "--port", "0"), "no weight store at"),
    Case("weights-verify-file", ("weights", "verify", "{file}"), "is a file"),
    Case("weights-verify-unreachable", ("weights", "verify", "{down}"), "cannot reach the weight store", 1),
    Case("weights-log-unreachable", ("weights", "log", "{down}"), "cannot reach the weight store", 1),
    Case("weights-pull-unreachable", ("weights", "pull", "{down}", "--out", "{tmp}/pulled"),
         "cannot reach the weight store", 1, ("{tmp}/pulled",), forbid="resume"),
    Case("weights-serve-taken-port", ("weights", "serve", "{tmp}/store", "--port", "{taken}"), "cannot listen on"),
    # files that are not what the command reads
    Case("replay-actions-directory", ("replay", "--task", str(TASKS / "demo-001"), "--actions", "{tmp}",
                                      "--sandbox", "process"), "is a directory"),
    Case("replay-actions-not-utf8", ("replay", "--task", str(TASKS / "demo-001"), "--actions", "{tmp}/actions.bin",
                                     "--sandbox", "process"), "not UTF-8"),
    Case("model-build-out-is-a-file", ("model", "build", "--out", "{file}"), "is a file"),
    Case("task-check-file", ("tasks", "check", "{file}"), "is a file"),
    Case("task-check-missing", ("tasks", "check", "{tmp}/no-task"), "does not exist"),
    Case("task-check-older-spelling", ("task", "check", "{tmp}/no-task"), "does not exist"),
    Case("train-config-missing", ("train", "{tmp}/no.toml", "--dry-run"), "no.toml"),
    # servers: the port is bound before anything loads, so a taken one is the first error
    Case("serve-taken-port", ("serve", "--model", "{tmp}", "--port", "{taken}"), "cannot listen on"),
    Case("env-server-taken-port", ("sandbox", "env-server", "--port", "{taken}", "--backend", "process"),
         "cannot listen on"),
    Case("serve-model-missing", ("serve", "--model", "{tmp}/no-model", "--port", "0"), "no-model"),
    # backend names: each command reads the kind's registry and lists the names it takes
    Case("eval-backend-unknown", ("eval", "--tasks", str(TASKS), "--out", "{tmp}/ev/eval.json", "--backend", "nope",
                                  "--model", "{down}/v1"),
         "unknown sandbox backend 'nope': use auto, bwrap or process", 2, ("{tmp}/ev",)),
    Case("task-check-backend-remote", ("tasks", "check", str(TASKS / "demo-001"), "--backend", "remote"),
         "sandbox backend 'remote' needs a server elsewhere, not accepted here: use auto, bwrap or process"),
    Case("sandbox-run-backend-unknown", ("sandbox", "run", "{tmp}", "--backend", "nope", "--", "true"),
         "unknown sandbox backend 'nope'", forbid="Traceback"),
    Case("sandbox-demo-backend-unknown", ("sandbox", "demo", "--backend", "nope"),
         "unknown sandbox backend 'nope'", forbid="Traceback"),
    Case("agent-sandbox-unknown", ("agent", "--repo", "{repo}", "--task", "fix it", "--yes", "--sandbox", "nope",
                                   "--model", "{down}/v1"), "unknown sandbox backend 'nope'", 2, ("{repo}/.inhabit",)),
]  # fmt: skip

# A log record of the plain (non-terminal) format; ERROR records are not let through.
LOG_RECORD = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ (DEBUG|INFO|WARNING) inhabit")


def _openai_app() -> FastAPI:
    """OpenAI's error shapes: 401 without the key, 404 for a model it does not serve."""
    app = FastAPI()

    def refuse(request: Request) -> JSONResponse | None:
        if request.headers.get("authorization") != "Bearer right-key":
            error = {
                "message": "Incorrect API key provided",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
            return JSONResponse({"error": error}, status_code=401)
        return None

    @app.get("/v1/models")
    def models(request: Request) -> object:
        return refuse(request) or {
            "object": "list",
            "data": [{"id": "served", "object": "model", "owned_by": "t"}],
        }

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> JSONResponse:
        if denied := refuse(request):
            return denied
        model = (await request.json()).get("model")
        error = {"message": f"The model `{model}` does not exist.", "type": "invalid_request_error",
                 "code": "model_not_found"}  # fmt: skip
        return JSONResponse({"error": error}, status_code=404)

    return app


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        down = probe.getsockname()[1]  # closed again at once: nothing listens there
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with BackgroundServer(_openai_app()) as openai:
            yield {
                "down": f"http://127.0.0.1:{down}",
                "openai": openai.url,
                "taken": str(taken.getsockname()[1]),
            }
    finally:
        taken.close()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_line_and_a_nonzero_exit(
    case: Case, servers: dict[str, str], tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (tmp_path / "store").mkdir()
    (tmp_path / "actions.bin").write_bytes(b"\xff\xfe[not utf-8")
    file = tmp_path / "a-file.txt"
    file.write_text("keep")
    where = {**servers, "tmp": str(tmp_path), "repo": str(repo), "file": str(file)}
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "INHABIT_MODEL")}
    env["PYTHONPATH"] = str(ROOT / "src")
    proc = subprocess.run(
        [sys.executable, "-m", "inhabit", *(a.format(**where) for a in case.args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=60,
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip() and not LOG_RECORD.match(line)]
    report = f"exit {proc.returncode}\nstderr:\n{proc.stderr}\nstdout:\n{proc.stdout[-2000:]}"
    assert proc.returncode == case.code, report
    assert "Traceback" not in proc.stderr + proc.stdout, report
    assert len(lines) == 1 and lines[0].startswith("error: "), report
    assert case.expect in lines[0], report
    assert case.forbid is None or case.forbid not in proc.stderr, report
    for path in case.not_written:
        assert not Path(path.format(**where)).exists(), f"{path} was written\n{report}"
    assert file.read_text() == "keep"
