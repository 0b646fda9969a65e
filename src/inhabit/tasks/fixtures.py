"""pytest fixtures for tests that need tiny real task directories and a real sandbox provider.

Imported by the conftest.py of the task and grading tests (one definition, no copies):

    from inhabit.tasks.fixtures import calc_task, fast_command, make_task, sandbox_provider  # noqa: F401

  * `sandbox_provider`: a process-backend provider (fast, no isolation needed for these tests;
    INHABIT_TEST_SANDBOX=bwrap runs the same tests on the isolating backend);
  * `fast_command`: the task test command with plugin autoload off (starts ~3x faster here);
  * `calc_task`: the calculator task of examples/tasks/demo-001 (bug in add, visible + hidden tests, reference.patch);
  * `make_task`: write any task directory: make_task(workspace={...}, hidden={...}, ...) -> Task.

Only test code imports this module (it needs pytest).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from inhabit.sandbox import SandboxConfig, SandboxLimits, create_provider
from inhabit.tasks.build import write_calc_task, write_task
from inhabit.tasks.task import Task, load_task

# The venv's python at its real path: the bwrap backend binds the venv there, not the worktree link.
PYTHON = Path(sys.prefix).resolve() / "bin" / "python"
FAST_COMMAND = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {PYTHON} -m pytest -q -p no:cacheprovider"


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
