"""A suite with a test that reads its own file (boltons' traceback tests check the source lines of
their own frames): grading hides test sources, so that test fails there with the bug or the fix.
The build drops it from what tasks require (and counts it), and the tasks it builds are valid;
before, every task of such a suite required it and `tasks check` rejected them all."""

from __future__ import annotations

from inhabit.grading.check import check_task
from inhabit.taskgen.builder import BuildConfig, build_tasks
from inhabit.tasks.task import load_task
from task_fixtures import CLAMP_PROJECT, write_tree

READS_ITSELF = """import inspect


def test_its_own_source():
    assert "READS_ITS_OWN_SOURCE" in inspect.getsource(test_its_own_source)
"""


async def test_a_test_that_reads_its_own_source_is_not_required(tmp_path, sandbox_provider):
    project = write_tree(tmp_path / "p", CLAMP_PROJECT | {"tests/test_source.py": READS_ITSELF})
    cfg = BuildConfig(operators=("flip_comparison",), per_function=2)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    assert report.graded_failing_dropped == 1 and report.baseline_tests == 3, report
    assert report.kept >= 1, (report.statuses, report.rejected)
    for task_id in report.tasks:
        task = load_task(tmp_path / "out" / task_id)
        assert not any("test_source.py" in t for t in task.grading.pass_to_pass + task.grading.fail_to_pass)
        check = await check_task(tmp_path / "out" / task_id, sandbox_provider)
        assert check.valid, check.problems
