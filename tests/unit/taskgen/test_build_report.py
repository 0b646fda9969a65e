"""What `inhabit tasks build` says about its candidates: a reason a user can act on for each one it
rejects (a bug whose NameError gives it away, a task `tasks check` refuses, with what grading saw
and where), the operator and failure mix of what it kept, and instructions without addresses."""

from __future__ import annotations

from pathlib import Path

from inhabit.taskgen.builder import BuildConfig, build_tasks
from inhabit.tasks.task import load_task
from task_fixtures import write_tree

CODE = '''"""Shapes."""


class Box:
    def __init__(self, v):
        self.v = v


def boxed(v):
    if v > 0:
        return Box(v)
    return None


def area(w, h):
    s = w * h
    return s
'''

TESTS = """from minilib.core import area, boxed


def test_boxed_zero():
    assert boxed(0) is None


def test_boxed_one():
    assert boxed(1).v == 1


def test_area():
    assert area(2, 3) == 6


def test_area_square():
    assert area(3, 3) == 9
"""

# A library that rewrites a function of the test module the runner calls, during a test: grading
# the untouched workspace is runner_tampered, so no task survives `tasks check`, and each rejection
# says which object changed, where it is defined and which line changed it.
NEUTER = '''"""A helper that rewrites what it is given."""


def neuter(fn):
    fn.__code__ = (lambda *a, **k: None).__code__


def double(x):
    return x * 2
'''

NEUTER_TESTS = """import sys

from minilib.tools import double, neuter


def helper():
    return 1


def test_double():
    assert double(2) == 4


def test_double_zero():
    assert double(0) == 0


def test_neuter():
    neuter(sys.modules[__name__].helper)
"""


def write_project(root: Path, files: dict[str, str]) -> Path:
    return write_tree(root, {"minilib/__init__.py": "", **files})


async def test_rejections_have_reasons_and_kept_tasks_a_mix(tmp_path, sandbox_provider):
    project = write_project(tmp_path / "p", {"minilib/core.py": CODE, "tests/test_core.py": TESTS})
    cfg = BuildConfig(operators=("flip_comparison", "drop_statement"), per_function=2)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    # `s = w * h` -> `pass`: the failure names the line (NameError: name 's' is not defined).
    giveaways = [r for r in report.rejected if r["status"] == "giveaway"]
    assert giveaways and "NameError" in giveaways[0]["reason"], report.rejected
    assert "drop_statement in area" in giveaways[0]["reason"]
    assert all(r["reason"] and r["candidate"] in r["reason"] for r in report.rejected)
    assert report.operators["drop_statement"]["tried"] >= 1
    assert sum(op["kept"] for op in report.operators.values()) == report.kept >= 1
    assert sum(report.failure_kinds.values()) == report.kept
    boxed = [t for t in report.tasks if "test_boxed_zero" in load_task(tmp_path / "out" / t).instruction]
    assert boxed, report.statuses
    instruction = load_task(tmp_path / "out" / boxed[0]).instruction
    assert "Box object at 0x..." in instruction  # the address, which differs per run, is gone
    assert "0x7" not in instruction


async def test_a_flagged_untouched_workspace_is_named_in_each_rejection(tmp_path, sandbox_provider):
    files = {"minilib/tools.py": NEUTER, "tests/test_tools.py": NEUTER_TESTS}
    project = write_project(tmp_path / "p", files)
    cfg = BuildConfig(operators=("wrong_operator", "wrong_constant"), per_function=2)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    assert report.kept == 0
    invalid = [r for r in report.rejected if r["status"] == "invalid"]
    assert invalid, report.rejected
    for r in invalid:
        assert "'runner_tampered'" in r["reason"]
        assert "__code__ of helper was replaced (defined at tests/test_tools.py:6" in r["reason"]
        assert "written by minilib/tools.py:5 during tests/test_tools.py::test_neuter" in r["reason"]


# boltons' shape: the library copies a function (a new function object over the test's code) and
# gives the copy the original's keyword defaults; its own test copies a function it defines.
COPIER = '''"""Copies of functions, and a number helper."""

import types


def copy_function(orig):
    ret = types.FunctionType(orig.__code__, orig.__globals__, orig.__name__, orig.__defaults__)
    ret.__kwdefaults__ = orig.__kwdefaults__
    return ret


def double(x):
    return x * 2
'''

COPIER_TESTS = """from minilib.funcs import copy_function, double


def test_copy_function():
    def callee(a, *, b=3):
        return a + b

    callee_copy = copy_function(callee)
    assert callee_copy is not callee
    assert callee_copy(1) == callee(1) == 4


def test_double():
    assert double(2) == 4


def test_double_zero():
    assert double(0) == 0
"""


async def test_a_library_rewriting_its_copies_of_test_functions_builds_tasks(tmp_path, sandbox_provider):
    files = {"minilib/funcs.py": COPIER, "tests/test_funcs.py": COPIER_TESTS}
    project = write_project(tmp_path / "p", files)
    cfg = BuildConfig(operators=("wrong_operator", "wrong_constant"), per_function=2)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    assert not [r for r in report.rejected if "runner_tampered" in r["reason"]], report.rejected
    assert report.kept >= 1, report.rejected
