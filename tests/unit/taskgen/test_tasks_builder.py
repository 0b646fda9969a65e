"""`inhabit tasks build` on a small project each test writes itself (no third-party code), and on a
real sdist from PyPI (slow)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.grading.check import check_task
from inhabit.taskgen.builder import BuildConfig, BuildError, build_tasks
from inhabit.tasks.task import load_task
from task_fixtures import write_tree

PYTHON = Path(sys.prefix).resolve() / "bin" / "python"

CORE = '''"""A tiny library."""


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x


def total(items):
    s = 0
    for it in items:
        s += it
    return s


def first_word(text):
    parts = text.split(" ")
    return parts[0]


def never_called(x):
    return x * 2
'''

TESTS = """from minilib.core import clamp, first_word, total


def test_clamp_low():
    assert clamp(-5, 0, 10) == 0


def test_clamp_high():
    assert clamp(50, 0, 10) == 10


def test_clamp_mid():
    assert clamp(5, 0, 10) == 5


def test_total():
    assert total([1, 2, 3]) == 6


def test_first_word():
    assert first_word("hello big world") == "hello"


def test_already_broken():
    assert total([1]) == 2
"""


def write_project(root: Path) -> Path:
    files = {"minilib/__init__.py": '"""minilib."""\n', "minilib/core.py": CORE, "tests/test_core.py": TESTS}
    return write_tree(root, files)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """One full build (with `tasks check` of every task) shared by the assertions below."""
    import asyncio

    from inhabit.sandbox import SandboxConfig, create_provider

    tmp = tmp_path_factory.mktemp("build")
    project = write_project(tmp / "minilib-src")
    subprocess.run(["git", "init", "-q", str(project)], check=True)
    out = tmp / "out"

    async def run():
        provider = create_provider(SandboxConfig(backend="process"))
        try:
            return await build_tasks(project, out, provider, BuildConfig(), progress=False)
        finally:
            await provider.close()

    return asyncio.run(run()), out


def test_build_keeps_valid_tasks_with_hidden_reference_patches(built):
    report, out = built
    assert report.baseline_tests == 5 and report.baseline_failing_dropped == 1
    assert report.kept >= 3 and len(report.tasks) == report.kept
    # never_called's lines run in no test: no candidate there (it could only break nothing).
    assert report.uncovered_sites_skipped
    assert not any("never_called" in r["candidate"] for r in report.rejected)
    assert all(r["reason"] for r in report.rejected)
    assert sum(report.statuses.values()) == report.candidates
    assert json.loads((out / "build-report.json").read_text())["kept"] == report.kept
    for task_id in report.tasks:
        task = load_task(out / task_id)
        assert task.reference_patch == out / task_id / "reference.patch"
        assert not (task.workspace_dir / ".git").exists()  # no history that shows the fix
        assert not list(task.workspace_dir.rglob("reference.patch")) and not list(
            task.workspace_dir.rglob("mutation.json")
        )
        spec = task.grading
        assert spec is not None and spec.fail_to_pass
        required = set(spec.fail_to_pass) | set(spec.pass_to_pass)
        assert "tests/test_core.py::test_already_broken" not in required  # failed before mutation
        assert len(required) == 5
        for node in spec.fail_to_pass:
            assert node in task.instruction
        fix = [
            ln[1:].strip()
            for ln in task.reference_patch.read_text().splitlines()
            if ln.startswith("+") and not ln.startswith("+++")
        ]
        assert fix and not any(line in task.instruction for line in fix)
        mutated = (task.workspace_dir / "minilib" / "core.py").read_text()
        assert mutated != CORE


async def test_a_built_task_passes_task_check(built, sandbox_provider):
    report, out = built
    check = await check_task(out / report.tasks[0], sandbox_provider)
    assert check.valid, check.problems
    assert check.after and check.after["reward"] == 1.0 and check.before and check.before["reward"] == 0.0


async def test_resume_skips_recorded_candidates_and_redoes_lost_ones(tmp_path, sandbox_provider):
    project = write_project(tmp_path / "p")
    # Also an sdist: the archive's single top folder is stripped.
    sdist = tmp_path / "minilib-0.1.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        tar.add(project, arcname="minilib-0.1")
    cfg = BuildConfig(max_candidates=3, check=False)
    out = tmp_path / "out"
    first = await build_tasks(sdist, out, sandbox_provider, cfg, progress=False)
    assert first.candidates == 3 and first.resumed == 0 and first.project == "minilib-0.1"
    state = out / ".build" / "state.jsonl"
    lines = state.read_text().splitlines()
    assert json.loads(lines[0])["kind"] == "header" and len(lines) == 4
    # An interrupted build: the last record never made it to disk.
    state.write_text("\n".join(lines[:-1]) + "\n")
    again = await build_tasks(sdist, out, sandbox_provider, cfg, progress=False)
    assert again.resumed == 2 and again.candidates == 3
    assert len(state.read_text().splitlines()) == 4
    assert sorted(again.tasks) == sorted(first.tasks)
    with pytest.raises(BuildError, match="other settings"):
        await build_tasks(sdist, out, sandbox_provider, cfg.model_copy(update={"seed": 1}), progress=False)


async def test_coverage_selection_skips_uncovered_functions(tmp_path, sandbox_provider):
    project = write_project(tmp_path / "p")
    cfg = BuildConfig(coverage_above_s=0.0, check=False, operators=("return_none",), covered_sites=False)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    assert report.coverage_selection
    assert report.statuses.get("uncovered") == 1  # never_called: no test runs it, no run needed
    assert report.kept == 3  # clamp, total, first_word: confirmed on the full suite
    for task_id in report.tasks:
        assert len(load_task(tmp_path / "out" / task_id).grading.required_tests) == 5


def test_cli_build_prints_a_table_and_reports_bad_input(tmp_path):
    project = write_project(tmp_path / "p")
    result = CliRunner().invoke(app, ["tasks", "build", "--from", str(project), "--out", str(tmp_path / "o"),
                                      "--max-candidates", "2", "--no-check", "--backend", "process"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "validity rate" in result.stdout and "candidates" in result.stdout
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "mod.py").write_text("def f(x):\n    return x + 1\n")
    (tmp_path / "bad" / "test_mod.py").write_text("def test_f():\n    import nope\n")
    result = CliRunner().invoke(app, ["tasks", "build", "--from", str(tmp_path / "bad"), "--out", str(tmp_path / "o2"),
                                      "--backend", "process"])  # fmt: skip
    assert result.exit_code == 2 and "does not run on the untouched project" in result.output


@pytest.mark.slow
async def test_build_from_a_real_sdist(tmp_path, sandbox_provider):
    """Downloads tabulate's source distribution from PyPI at test time (no third-party code ships)."""
    res = subprocess.run(
        [str(PYTHON), "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "tabulate", "-d", str(tmp_path / "dl")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    sdists = list((tmp_path / "dl").glob("tabulate-*.tar.gz")) if res.returncode == 0 else []
    if not sdists:
        pytest.skip(f"could not download tabulate's sdist from PyPI: {res.stderr[-300:]}")
    report = await build_tasks(
        sdists[0], tmp_path / "out", sandbox_provider, BuildConfig(max_candidates=4), progress=False
    )
    assert report.baseline_tests > 100
    assert report.kept >= 1
    for task_id in report.tasks:
        assert (await check_task(tmp_path / "out" / task_id, sandbox_provider)).valid


IO = """def maybe_write(flag):
    if flag:
        with open("stray.txt", "w") as f:
            f.write("x")
    return flag


def double(x):
    return x * 2
"""

IO_TESTS = """import os

from pkg.io import double, maybe_write


def test_a_call():
    assert maybe_write(False) is False


def test_double():
    assert double(2) == 4


def test_z_no_stray_file():
    assert not os.path.exists("stray.txt")
"""


async def test_tree_is_reset_between_mutants(tmp_path, sandbox_provider):
    (tmp_path / "p" / "pkg").mkdir(parents=True)
    (tmp_path / "p" / "tests").mkdir()
    (tmp_path / "p" / "pkg" / "__init__.py").write_text("")
    (tmp_path / "p" / "pkg" / "io.py").write_text(IO)
    (tmp_path / "p" / "tests" / "test_io.py").write_text(IO_TESTS)
    cfg = BuildConfig(operators=("negate_condition", "return_none"), per_function=2, check=False)
    report = await build_tasks(
        tmp_path / "p", tmp_path / "out", sandbox_provider, cfg, concurrency=1, progress=False
    )
    state = [
        json.loads(line)
        for line in (tmp_path / "out" / ".build" / "state.jsonl").read_text().splitlines()[1:]
    ]
    order = [r["mutation"].split(" ")[0] for r in state]
    assert order.index("negate_condition") < len(order) - 1  # a mutant ran after the one that writes
    assert report.kept == 3
    stray = "tests/test_io.py::test_z_no_stray_file"
    for r in state:
        spec = load_task(tmp_path / "out" / r["task_id"]).grading
        if r["mutation"].startswith("negate_condition"):
            assert spec.fail_to_pass == (stray,)
        else:  # the stray file of the earlier mutant is gone: this test still passes
            assert stray in spec.pass_to_pass


async def test_a_built_task_moved_elsewhere_passes_task_check(built, tmp_path, sandbox_provider):
    """A task directory names no path of the machine that built it: copied to another place
    (here: another folder, the builder's tree gone from under it) it checks the same."""
    report, out = built
    toml = (out / report.tasks[0] / "task.toml").read_text()
    assert str(out) not in toml and str(Path(sys.prefix).resolve()) not in toml and "/bin/python" not in toml
    assert 'command = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest' in toml
    moved = tmp_path / "elsewhere" / report.tasks[0]
    shutil.copytree(out / report.tasks[0], moved)
    check = await check_task(moved, sandbox_provider)
    assert check.valid, check.problems
    assert check.after and check.after["reward"] == 1.0
