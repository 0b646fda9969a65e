"""pytest fixtures shared by the task, grading and evaluation tests: tiny real task directories,
a real sandbox provider and a scripted OpenAI-compatible endpoint.

The conftest.py of tests/unit/tasks, tests/unit/taskgen, tests/unit/grading, tests/unit/rewards and tests/unit/evaluation import what they
use from here (pytest puts tests/, the root conftest's folder, on sys.path):

    from task_fixtures import calc_task, fast_command, make_task, sandbox_provider  # noqa: F401

  * `sandbox_provider`: a process-backend provider (fast, no isolation needed for these tests;
    INHABIT_TEST_SANDBOX=bwrap runs the same tests on the isolating backend);
  * `fast_command`: the task test command with plugin autoload off (starts ~3x faster here);
  * `calc_task`: the calculator task (bug in add, visible + hidden tests, reference.patch);
  * `make_task`: write any task directory: make_task(workspace={...}, hidden={...}, ...) -> Task;
  * `chat_server`: start(reply) -> (state, base_url), a chat-completions server on 127.0.0.1
    (the agent's policy and LLM judges talk to it);
  * `write_tree(root, files)`: a small project on disk (relative path -> text), for the builders;
    `CLAMP_PROJECT` the smallest such project (minilib.core.clamp and three tests).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from inhabit.sandbox import SandboxConfig, SandboxLimits, create_provider
from inhabit.serving import BackgroundServer
from inhabit.tasks.build import write_calc_task, write_task
from inhabit.tasks.task import Task, load_task

# The venv's python at its real path: the bwrap backend binds the venv there, not the worktree link.
PYTHON = Path(sys.prefix).resolve() / "bin" / "python"
FAST_COMMAND = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PYTHON} -m pytest -q -p no:cacheprovider"


def write_tree(root: Path, files: dict[str, str]) -> Path:
    """Write `files` (path relative to `root` -> text) under `root`, making folders; returns root."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


# A one-module package with three tests of `clamp`: the smallest project the builders turn
# into tasks (tests add their own configuration or conftest beside it).
_CLAMP_CODE = '''"""Bounds."""


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
'''

_CLAMP_TESTS = """from minilib.core import clamp


def test_low():
    assert clamp(-1, 0, 5) == 0


def test_high():
    assert clamp(9, 0, 5) == 5


def test_mid():
    assert clamp(3, 0, 5) == 3
"""

CLAMP_PROJECT = {
    "minilib/__init__.py": "",
    "minilib/core.py": _CLAMP_CODE,
    "tests/test_core.py": _CLAMP_TESTS,
}


@pytest.fixture
def fast_command() -> str:
    return FAST_COMMAND


@pytest.fixture
async def sandbox_provider():
    limits = SandboxLimits(memory_mb=2048, default_timeout_s=60.0, output_bytes=256 * 1024)
    # INHABIT_TEST_SANDBOX=bwrap runs the same tests on the isolating backend (slower to start).
    backend = os.environ.get("INHABIT_TEST_SANDBOX", "process")
    provider = create_provider(SandboxConfig(backend=backend, limits=limits))
    yield provider
    await provider.close()


@pytest.fixture
def calc_task(tmp_path: Path) -> Task:
    return load_task(write_calc_task(tmp_path / "calc-task", command=FAST_COMMAND))


@pytest.fixture
def make_task(tmp_path: Path):
    counter = iter(range(1000))

    def make(**kw) -> Task:
        kw.setdefault("id", "t")
        kw.setdefault("instruction", "do it")
        kw.setdefault("command", FAST_COMMAND)
        return load_task(write_task(tmp_path / f"task-{next(counter)}", **kw))

    return make


@pytest.fixture
def chat_server() -> Iterator[Callable[[Callable[[dict], str]], tuple[dict, str]]]:
    """start(reply) -> (state, base_url): a chat-completions server on 127.0.0.1 whose answer is
    `reply(request body)`; state["seen"] holds the requests. Stopped at teardown."""
    with contextlib.ExitStack() as servers:
        yield lambda reply: _serve(reply, servers)


def _serve(reply: Callable[[dict], str], servers: contextlib.ExitStack) -> tuple[dict, str]:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    state: dict = {"seen": []}
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0,
                                                         "owned_by": "test"}]})  # fmt: skip

    @app.post("/v1/chat/completions")
    def chat(body: dict) -> JSONResponse:
        state["seen"].append(body)
        text = reply(body)
        return JSONResponse(
            {
                "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
            }
        )  # fmt: skip

    server = servers.enter_context(BackgroundServer(app))
    return state, f"{server.url}/v1"
