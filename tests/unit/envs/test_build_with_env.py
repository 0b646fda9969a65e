"""`inhabit tasks build` on a project whose tests need a third-party package (a wheel made in the
test, offline): the build locks and builds the environment once, every kept task carries it and
passes `tasks check`, and a second build reuses it (install time 0)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.taskgen.builder import BuildConfig, build_tasks
from inhabit.tasks.task import load_task

CODE = '''"""Arithmetic on top of tinydep."""

import tinydep


def quadruple(x):
    return tinydep.double(tinydep.double(x))


def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x > hi:
        return hi
    return x
'''
TESTS = """import tinydep

from quadlib.core import clamp, quadruple


def test_quadruple():
    assert quadruple(3) == 12


def test_double():
    assert tinydep.double(5) == 10


def test_clamp_low():
    assert clamp(-1, 0, 9) == 0


def test_clamp_high():
    assert clamp(99, 0, 9) == 9


def test_clamp_mid():
    assert clamp(4, 0, 9) == 4
"""


def write_project(root: Path) -> Path:
    (root / "src" / "quadlib").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "src" / "quadlib" / "__init__.py").write_text('"""quadlib."""\n')
    (root / "src" / "quadlib" / "core.py").write_text(CODE)
    (root / "tests" / "test_core.py").write_text(TESTS)
    (root / "pyproject.toml").write_text(
        '[project]\nname = "quadlib"\nversion = "0.1"\n[project.optional-dependencies]\ntest = ["tinydep"]\n'
    )
    return root


async def test_build_locks_once_every_task_carries_the_environment_and_a_rebuild_reuses_it(
    tmp_path, wheelhouse, sandbox_provider, monkeypatch
):
    monkeypatch.setenv("INHABIT_CACHE_DIR", str(tmp_path / "cache"))  # an empty store: built here
    project = write_project(tmp_path / "quadlib")  # a src layout: tests import the workspace's code
    cfg = BuildConfig(max_candidates=4, operators=("flip_comparison", "return_none"))
    report = await build_tasks(
        project, tmp_path / "out", sandbox_provider, cfg, progress=False, wheelhouse=wheelhouse
    )
    assert report.env_id and report.env_id.startswith("sha256:") and not report.env_reused
    assert report.kept >= 2, report.statuses
    for task_id in report.tasks:
        task = load_task(tmp_path / "out" / task_id)  # each was `tasks check`ed during the build
        assert task.environment is not None and task.environment.id == report.env_id
        assert "tinydep==1.0" in task.environment_lock.read_text()
        assert "/" not in task.grading.command.split(" python ")[0].replace("src:$PYTHONPATH", "")


def test_the_build_report_prints_the_environment_and_a_second_build_reuses_it(
    tmp_path, env_cache, wheelhouse
):
    project = write_project(tmp_path / "quadlib")
    shown = []
    for out in ("one", "two"):
        result = CliRunner().invoke(
            app,
            ["tasks", "build", "--from", str(project), "--out", str(tmp_path / out), "--max-candidates", "1",
             "--no-check", "--backend", "process", "--wheelhouse", str(wheelhouse)],
        )  # fmt: skip
        assert result.exit_code == 0, result.output
        rows = {
            ln.split("│")[1].strip(): ln.split("│")[2].strip()
            for ln in result.stdout.splitlines()
            if ln.count("│") == 3
        }
        shown.append(rows)
    assert (
        shown[0]["environment"].startswith("sha256:") and shown[0]["environment"] == shown[1]["environment"]
    )
    assert shown[1]["environment reused"] == "yes" and shown[1]["environment install (s)"] == "0.00"
