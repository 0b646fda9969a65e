"""Built tasks require every passing test, never a sample: a "fix" of the planted bug that breaks
code only one test far from the bug checks earns 0."""

from __future__ import annotations

from pathlib import Path

from inhabit.grading.check import apply_patch
from inhabit.grading.grader import grade
from inhabit.taskgen.builder import BuildConfig, build_tasks
from inhabit.tasks.task import load_task
from task_fixtures import write_tree

CODE = '''"""Bounds and labels."""


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def label(n):
    return "n" + str(n)
'''

# 60 label tests (more than the 50 a sample would have kept) beside the three clamp tests.
TESTS = """import pytest

from minilib.core import clamp, label


def test_low():
    assert clamp(-1, 0, 5) == 0


def test_high():
    assert clamp(9, 0, 5) == 5


def test_mid():
    assert clamp(3, 0, 5) == 3


@pytest.mark.parametrize("n", range(60))
def test_label(n):
    assert label(n) == "n" + str(n)
"""


def write_project(root: Path) -> Path:
    return write_tree(root, {"minilib/__init__.py": "", "minilib/core.py": CODE, "tests/test_core.py": TESTS})


async def test_a_fix_that_breaks_a_test_far_from_the_bug_earns_zero(tmp_path, sandbox_provider):
    project = write_project(tmp_path / "p")
    cfg = BuildConfig(operators=("flip_comparison",), per_function=1)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    clamp_tasks = [t for t in report.tasks if "clamp" in load_task(tmp_path / "out" / t).instruction]
    assert clamp_tasks, report.statuses
    task = load_task(tmp_path / "out" / clamp_tasks[0])
    spec = task.grading
    assert set(spec.fail_to_pass) | set(spec.pass_to_pass) == {
        *(f"tests/test_core.py::test_{n}" for n in ("low", "high", "mid")),
        *(f"tests/test_core.py::test_label[{n}]" for n in range(60)),
    }
    assert task.reference_patch is not None
    for breaks_label, reward in ((False, 1.0), (True, 0.0)):
        async with await sandbox_provider.create(task.workspace_dir) as sandbox:
            assert await apply_patch(sandbox, task.reference_patch.read_bytes()) is None
            if breaks_label:  # the bug fixed, and label(59) broken on the way
                fixed = (await sandbox.read_file("minilib/core.py")).decode()
                broken = fixed.replace('return "n" + str(n)', 'return "n" + str(n) if n != 59 else "n"')
                await sandbox.write_file("minilib/core.py", broken)
            result = await grade(task, sandbox, sandbox_provider)
        assert result.reward == reward, result.details
    assert result.outcomes["tests/test_core.py::test_label[59]"] == "failed"
