"""A mutant that runs past its limit because the machine got slower is no loop that never ends.

The build's limit for one mutant's run comes from the baseline measured when it started (or from
`timeout_s`). On a shared machine whose load rises during the build (python-slugify 9.2.0: a
3.8 s suite, a 31 s limit, the 1-minute load average at 37 by the time mutants ran), every run
outgrows that limit and honest mutants were rejected as `timeout`. Here the untouched suite itself
needs longer than the limit (its conftest sleeps 3 s): each timed-out mutant is judged again
under a limit from the untouched suite timed now, so its bug is classified by what the tests say.
"""

from __future__ import annotations

from pathlib import Path

from inhabit.taskgen.builder import BuildConfig, build_tasks
from task_fixtures import CLAMP_PROJECT, write_tree

# The suite's fixed start-up cost: what a busier machine adds to every run.
CONFTEST = """import time


def pytest_sessionstart(session):
    time.sleep(3)
"""


def write_project(root: Path) -> Path:
    return write_tree(root, CLAMP_PROJECT | {"tests/conftest.py": CONFTEST})


async def test_a_limit_the_untouched_suite_outgrows_rejects_no_mutant_as_timeout(tmp_path, sandbox_provider):
    project = write_project(tmp_path / "p")
    cfg = BuildConfig(operators=("flip_comparison",), per_function=2, timeout_s=2.0, check=False)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    assert report.candidates == 2
    assert "timeout" not in report.statuses, report.rejected
    assert report.kept >= 1, report.statuses
