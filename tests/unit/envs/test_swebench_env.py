"""A SWE-bench-format instance whose tests need a third-party package imports with an
[environment] (the requirements its repository declares at the setup commit) and passes task check."""

from __future__ import annotations

import difflib
import json
import subprocess

from env_fixtures import CODE, FIXED, PYPROJECT, TESTS
from inhabit.grading.check import check_task
from inhabit.taskgen.swebench import import_swebench
from inhabit.tasks.task import load_task

OLD_TESTS = TESTS.split("\n\n\ndef test_quadruple")[0] + "\n\n\ndef test_dep" + TESTS.split("def test_dep")[1]


def _diff(path: str, a: str, b: str) -> str:
    return "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), f"a/{path}", f"b/{path}"))


def _git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


async def test_import_locks_the_declared_requirements_and_the_task_checks(
    tmp_path, env_cache, wheelhouse, monkeypatch, sandbox_provider
):
    monkeypatch.setenv("INHABIT_WHEELHOUSE", str(wheelhouse))
    repo = tmp_path / "repos" / "acme__quad"
    (repo / "tests").mkdir(parents=True)
    (repo / "quad.py").write_text(CODE)
    (repo / "tests" / "test_quad.py").write_text(OLD_TESTS)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    inst = {
        "instance_id": "acme__quad-1", "repo": "acme/quad", "base_commit": base, "environment_setup_commit": base,
        "problem_statement": "quadruple(3) returns 9.", "patch": _diff("quad.py", CODE, FIXED),
        "test_patch": _diff("tests/test_quad.py", OLD_TESTS, TESTS),
        "FAIL_TO_PASS": ["tests/test_quad.py::test_quadruple"], "PASS_TO_PASS": ["tests/test_quad.py::test_dep"],
    }  # fmt: skip
    other = {**inst, "instance_id": "acme__quad-2", "environment_setup_commit": "0" * 40}
    data = tmp_path / "instances.jsonl"
    data.write_text(json.dumps(inst) + "\n" + json.dumps(other) + "\n")
    report = import_swebench(data, tmp_path / "repos", tmp_path / "out", wheelhouse=wheelhouse)
    assert report.tasks == ["acme__quad-1", "acme__quad-2"] and not report.skipped
    assert report.environments["acme__quad-1"].startswith("sha256:")
    assert report.environments["acme__quad-2"].startswith("none: git archive 0000")  # says why
    task = load_task(tmp_path / "out" / "acme__quad-1")
    assert task.environment is not None and "tinydep==1.0" in task.environment_lock.read_text()
    check = await check_task(task.root, sandbox_provider)
    assert check.valid, check.problem_lines()
