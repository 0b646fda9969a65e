"""A project whose pytest addopts name coverage and report options: the task command leaves out
what only measures (and says so), tasks build without `--command`, and a suite that cannot start
names pytest's own complaint, not its last line."""

from __future__ import annotations

from pathlib import Path

from inhabit.grading.check import check_task
from inhabit.grading.diagnose import cannot_run, first_error_line
from inhabit.taskgen.addopts import addopts_override, measurement_options
from inhabit.taskgen.builder import BuildConfig, build_tasks
from inhabit.taskgen.source import default_command
from inhabit.tasks.task import load_task
from task_fixtures import CLAMP_PROJECT, write_tree

# semver's shape (.pytest.ini): coverage and its reports beside options that change what runs.
INI = """[pytest]
addopts =
    --no-cov-on-fail
    --cov=minilib
    --cov-report term-missing
    --durations=5
    --strict-markers
    -ra
"""

USAGE_ERROR = """ERROR: usage: python -m pytest [options] [file_or_dir] [file_or_dir] [...]
python -m pytest: error: unrecognized arguments: --no-cov-on-fail --cov=minilib
  inifile: /home/dev/project/.pytest.ini
  rootdir: /home/dev/project
"""


def write_project(root: Path) -> Path:
    return write_tree(root, CLAMP_PROJECT | {".pytest.ini": INI})


def test_measurement_options_are_told_from_the_rest():
    kept, dropped = measurement_options(
        [
            "--cov",
            "pkg",
            "--cov-report=xml",
            "--import-mode=importlib",
            "--benchmark-skip",
            "-p",
            "x",
            "--no-cov",
        ]
    )
    assert kept == ["--import-mode=importlib", "-p", "x"]
    assert dropped == ["--cov pkg", "--cov-report=xml", "--benchmark-skip", "--no-cov"]


def test_the_default_command_overrides_addopts_without_measurement(tmp_path):
    root = write_project(tmp_path / "p")
    override, dropped = addopts_override(root)
    assert dropped == ["--no-cov-on-fail", "--cov=minilib", "--cov-report term-missing", "--durations=5"]
    assert override == "-o 'addopts=--strict-markers -ra'"
    assert default_command(root).endswith(override)
    (root / ".pytest.ini").write_text("[pytest]\naddopts = -ra\n")
    assert "-o" not in default_command(root)  # nothing to leave out: the project's own addopts


def test_a_suite_that_cannot_start_names_the_unrecognized_options():
    assert first_error_line(USAGE_ERROR) == "error: unrecognized arguments: --no-cov-on-fail --cov=minilib"
    cause = cannot_run({}, ["(any)"], {}, integrity="missing", output_tail=USAGE_ERROR)
    assert cause is not None
    assert "unrecognized arguments: --no-cov-on-fail" in cause.message()
    assert "--plugins" in cause.hint


async def test_a_coverage_addopts_project_builds_tasks_without_a_command(tmp_path, sandbox_provider):
    project = write_project(tmp_path / "p")
    cfg = BuildConfig(operators=("flip_comparison",), per_function=2)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    assert report.measurement_options_dropped == [
        "--no-cov-on-fail", "--cov=minilib", "--cov-report term-missing", "--durations=5"
    ]  # fmt: skip
    assert report.baseline_tests == 3 and report.kept >= 1, report.statuses
    for task_id in report.tasks:
        task = load_task(tmp_path / "out" / task_id)
        assert "-o 'addopts=--strict-markers -ra'" in task.grading.command  # stated in the task
        check = await check_task(tmp_path / "out" / task_id, sandbox_provider)
        assert check.valid, check.problems
