"""`inhabit tasks check`: the shipped example is valid; broken tasks are invalid with a reason."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.grading.check import check_task
from inhabit.tasks.build import CALC_BUGGY, CALC_TESTS, write_calc_task, write_task

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tasks" / "demo-001"


def _invoke(*args: str):
    return CliRunner().invoke(app, ["task", "check", *args, "--backend", "process"])


def test_cli_example_is_valid_json():
    result = _invoke(str(EXAMPLE), "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["valid"] is True and report["problems"] == []
    assert report["task_id"] == "demo-001"
    assert report["before"]["reward"] == 0.0 and report["after"]["reward"] == 1.0
    kinds = {t["node_id"]: (t["kind"], t["before"], t["after"]) for t in report["tests"]}
    assert kinds["tests/test_calc.py::test_add"] == ("fail_to_pass", "failed", "passed")
    assert kinds["tests/test_hidden.py::test_sub_many[3-1-2]"] == ("pass_to_pass", "passed", "passed")


def test_cli_readable_report_and_format_error(tmp_path):
    root = write_calc_task(tmp_path / "ok")
    result = _invoke(str(root))
    assert result.exit_code == 0, result.output
    assert "VALID" in result.stdout and "fail_to_pass" in result.stdout
    (tmp_path / "bad").mkdir()
    result = _invoke(str(tmp_path / "bad"))
    assert result.exit_code == 1
    assert "no task.toml" in result.stdout and "INVALID" in result.stdout
    result = _invoke(str(tmp_path / "bad"), "--json")
    assert result.exit_code == 1 and json.loads(result.stdout)["valid"] is False


async def test_fail_to_pass_that_already_passes_is_invalid(tmp_path, sandbox_provider, fast_command):
    root = write_task(
        tmp_path / "t",
        id="t",
        instruction="x",
        workspace={"calc.py": CALC_BUGGY, "tests/test_calc.py": CALC_TESTS},
        fail_to_pass=["tests/test_calc.py::test_sub"],
        pass_to_pass=["tests/test_calc.py::test_add", "tests/test_calc.py::test_nope"],
        command=fast_command,
    )
    report = await check_task(root, sandbox_provider)
    assert not report.valid
    text = "\n".join(report.problem_lines())
    assert "fail_to_pass tests/test_calc.py::test_sub should fail before the fix but is passed" in text
    assert "pass_to_pass tests/test_calc.py::test_add should pass before the fix but is failed" in text
    assert "test_nope was not found" in text
    assert any("no reference.patch" in n for n in report.notes)


async def test_patch_that_does_not_apply_is_invalid(tmp_path, sandbox_provider, fast_command):
    root = write_calc_task(tmp_path / "t", command=fast_command)
    (root / "reference.patch").write_text("--- a/nope.py\n+++ b/nope.py\n@@ -1 +1 @@\n-x\n+y\n")
    report = await check_task(root, sandbox_provider)
    assert not report.valid
    assert any("reference.patch does not apply" in p for p in report.problem_lines())


async def test_reference_patch_that_edits_tests_is_invalid(tmp_path, sandbox_provider, fast_command):
    root = write_calc_task(tmp_path / "t", command=fast_command, hidden=False)
    (root / "reference.patch").write_text(
        "--- a/tests/test_calc.py\n+++ b/tests/test_calc.py\n@@ -4,3 +4,3 @@\n def test_add():\n"
        "-    assert add(2, 3) == 5\n+    assert add(2, 3) == -1\n \n"
    )
    report = await check_task(root, sandbox_provider)
    assert not report.valid
    assert any("test_file_modified" in p for p in report.problem_lines())


def test_report_prints_square_brackets_of_test_ids_and_messages(capsys):
    from inhabit.grading.check import CheckReport, Problem, TestCheck
    from inhabit.tasks.cli import _print_report

    report = CheckReport(
        path="/x/[task]",
        task_id="t[1]",
        tests=[TestCheck("tests/test_p.py::test_p[one]", "fail_to_pass", "failed", "passed", True)],
        problems=[Problem("format", "task.toml has no [grading] table")],
        notes=["see [bold]this[/bold]"],
    )
    _print_report(report)
    out = capsys.readouterr().out
    assert "test_p[one]" in out and "t[1]" in out and "/x/[task]" in out
    assert "no [grading] table" in out and "see [bold]this[/bold]" in out


MISSING_TESTS = "import frobnicate_absent\n\nfrom calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\ndef test_zero():\n    assert add(0, 0) == 0\n"


def _uncollectable(tmp_path: Path, command: str, where: str) -> Path:
    """The calculator task whose tests import a module nobody installed (in a test module or in a
    conftest.py: pytest collects the first with an error, and stops at the second before any report)."""
    tests = {"tests/test_calc.py": MISSING_TESTS}
    if where == "conftest":
        tests = {
            "tests/test_calc.py": MISSING_TESTS.split("\n", 2)[2],
            "tests/conftest.py": "import frobnicate_absent\n",
        }
    root = write_task(
        tmp_path / where,
        id="t",
        instruction="x",
        workspace={"calc.py": CALC_BUGGY, **tests},
        fail_to_pass=["tests/test_calc.py::test_add"],
        pass_to_pass=["tests/test_calc.py::test_zero"],
        command=command,
    )
    (root / "reference.patch").write_text(
        "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
    )
    return root


async def test_a_workspace_that_cannot_collect_is_one_problem_naming_the_module(
    tmp_path, sandbox_provider, fast_command
):
    for where in ("module", "conftest"):
        report = await check_task(_uncollectable(tmp_path, fast_command, where), sandbox_provider)
        assert not report.valid
        assert len(report.problems) == 1, report.problem_lines()  # once, not once per test id
        problem = report.problems[0]
        assert problem.kind == "cannot_run"
        assert problem.detail["missing_module"] == "frobnicate_absent"
        assert problem.detail["first_error"] == "ModuleNotFoundError: No module named 'frobnicate_absent'"
        assert "[environment]" in problem.message and "node id" not in problem.message
        assert "early_exit" not in problem.message and report.after is None


def test_json_problems_are_objects_not_reprs(tmp_path):
    root = _uncollectable(tmp_path, "python -m pytest -q -p no:cacheprovider", "module")
    result = _invoke(str(root), "--json")
    assert result.exit_code == 1, result.output
    problems = json.loads(result.stdout)["problems"]
    assert [p["kind"] for p in problems] == ["cannot_run"]
    assert problems[0]["detail"]["missing_module"] == "frobnicate_absent"
    assert "{'" not in result.stdout  # no Python dict repr anywhere


async def test_a_run_cut_at_the_time_limit_is_named_so_not_as_a_suite_that_cannot_start(
    tmp_path, sandbox_provider, fast_command
):
    slow_tests = CALC_TESTS + "\n\ndef test_slow():\n    import time\n\n    time.sleep(30)\n"
    root = write_task(
        tmp_path / "t",
        id="t",
        instruction="x",
        workspace={"calc.py": CALC_BUGGY, "tests/test_calc.py": slow_tests},
        fail_to_pass=["tests/test_calc.py::test_add"],
        pass_to_pass=["tests/test_calc.py::test_sub"],
        command=fast_command,
        timeout_s=5,
    )
    report = await check_task(root, sandbox_provider)
    assert not report.valid
    (problem,) = report.problems
    assert problem.kind == "grading"
    assert "ran past the task's time limit (5 s" in problem.message
    assert "cannot run its tests" not in problem.message
