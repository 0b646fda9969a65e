"""Write task directories (format 1) from Python: the small builder every synthetic task, test
and example uses.

    root = write_task(tmp / "t", id="x", instruction="...", workspace={"calc.py": "..."},
                      hidden={"tests/test_h.py": "..."}, fail_to_pass=[...], pass_to_pass=[...])
    task = load_task(root)

`write_calc_task` writes the calculator task (examples/tasks/demo-001) (a bug in `add`, visible tests, a hidden
test, a reference.patch): the smallest real task, shared by tests of several parts.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = ["CALC_BUGGY", "CALC_FIXED", "write_calc_task", "write_task"]

DEFAULT_COMMAND = "python -m pytest -q -p no:cacheprovider"


def _toml_str(value: str) -> str:
    # JSON string escapes are valid TOML basic-string escapes.
    return json.dumps(value)


def _write_tree(top: Path, files: Mapping[str, str | bytes]) -> None:
    for rel, content in files.items():
        p = top / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            p.write_bytes(content)
        else:
            p.write_text(content)


def write_task(
    root: str | Path,
    *,
    id: str,
    instruction: str,
    workspace: Mapping[str, str | bytes],
    hidden: Mapping[str, str | bytes] | None = None,
    fail_to_pass: Sequence[str] = (),
    pass_to_pass: Sequence[str] = (),
    command: str = DEFAULT_COMMAND,
    timeout_s: float = 120,
    reference_patch: str | None = None,
) -> Path:
    """Write a task directory at `root` (created) and return its path."""
    root = Path(root)
    (root / "workspace").mkdir(parents=True, exist_ok=True)
    _write_tree(root / "workspace", workspace)
    if hidden:
        (root / "hidden").mkdir(exist_ok=True)
        _write_tree(root / "hidden", hidden)
    lines = [
        f"id = {_toml_str(id)}",
        f"instruction = {_toml_str(instruction)}",
        "",
        "[grading]",
        f"command = {_toml_str(command)}",
        f"fail_to_pass = [{', '.join(_toml_str(t) for t in fail_to_pass)}]",
        f"pass_to_pass = [{', '.join(_toml_str(t) for t in pass_to_pass)}]",
        f"timeout_s = {float(timeout_s)}",
    ]
    (root / "task.toml").write_text("\n".join(lines) + "\n")
    if reference_patch is not None:
        (root / "reference.patch").write_text(reference_patch)
    return root


CALC_BUGGY = '''"""A tiny calculator with a bug in add."""


def add(a, b):
    return a - b


def sub(a, b):
    return a - b
'''

CALC_FIXED = CALC_BUGGY.replace("def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b")

CALC_TESTS = """from calc import add, sub


def test_add():
    assert add(2, 3) == 5


def test_sub():
    assert sub(5, 3) == 2
"""

CALC_HIDDEN_TESTS = '''"""Laid over the workspace at grading only: the agent never sees this file."""

import pytest

from calc import add, sub


def test_add_negative():
    assert add(-2, -3) == -5


@pytest.mark.parametrize(("a", "b", "want"), [(3, 1, 2), (0, 4, -4)])
def test_sub_many(a, b, want):
    assert sub(a, b) == want
'''

CALC_PATCH = "".join(
    difflib.unified_diff(CALC_BUGGY.splitlines(True), CALC_FIXED.splitlines(True), "a/calc.py", "b/calc.py")
)


def write_calc_task(
    root: str | Path,
    *,
    command: str = DEFAULT_COMMAND,
    hidden: bool = True,
    reference_patch: bool = True,
    extra_workspace: Mapping[str, str | bytes] | None = None,
) -> Path:
    """The calculator task: `add` subtracts; tests/test_calc.py shows it; hidden/ adds more tests."""
    fail = ["tests/test_calc.py::test_add"]
    keep = ["tests/test_calc.py::test_sub"]
    if hidden:
        fail.append("tests/test_hidden.py::test_add_negative")
        keep.append("tests/test_hidden.py::test_sub_many[3-1-2]")
    return write_task(
        root,
        id="calc-001",
        instruction="The test tests/test_calc.py::test_add fails. Fix the bug in calc.py.",
        workspace={"calc.py": CALC_BUGGY, "tests/test_calc.py": CALC_TESTS, **(extra_workspace or {})},
        hidden={"tests/test_hidden.py": CALC_HIDDEN_TESTS} if hidden else None,
        fail_to_pass=fail,
        pass_to_pass=keep,
        command=command,
        reference_patch=CALC_PATCH if reference_patch else None,
    )
