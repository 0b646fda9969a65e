"""Requirements only setup.py declares, read through the build backend (offline: the fixture
wheel, and setuptools repacked from inhabit's own install): the test extra, the extras tox.ini
installs, install_requires alone; a SWE-bench-format instance of such a project imports with an
environment that holds them and passes task check."""

from __future__ import annotations

import json
import subprocess

import pytest

from env_fixtures import CODE, FIXED, TESTS
from inhabit.envs.backend import backend_requirements
from inhabit.envs.requirements import project_requirements
from inhabit.errors import EnvError
from inhabit.grading.check import check_task
from inhabit.taskgen.swebench import import_swebench
from inhabit.tasks.task import load_task

SETUP = (
    "from setuptools import setup\n\n"
    'setup(name="quad", version="0.1", py_modules=["quad"], install_requires=[],\n'
    '      extras_require={"test": ["tinydep>=1"], "docs": ["nothing-here"]})\n'
)


def _project(root, setup=SETUP, tox=None):
    (root / "tests").mkdir(parents=True)
    (root / "quad.py").write_text(CODE)
    (root / "tests" / "test_quad.py").write_text(TESTS)
    (root / "setup.py").write_text(setup)
    if tox is not None:
        (root / "tox.ini").write_text(tox)
    return root


def test_setup_py_extras_are_read_through_the_build_backend(tmp_path, env_cache, wheelhouse):
    root = _project(tmp_path / "p")
    assert project_requirements(root) == []  # setup.py is never executed by the static reader
    reqs = backend_requirements(root, wheelhouse=wheelhouse)
    assert [(r.text, r.source) for r in reqs] == [("tinydep==1.0", "setup.py extra 'test' (build backend)")]


def test_tox_extras_and_install_requires(tmp_path, env_cache, wheelhouse):
    setup = SETUP.replace("install_requires=[]", 'install_requires=["tinydep"]').replace('"test"', '"reco"')
    root = _project(tmp_path / "p", setup, tox="[testenv]\nextras = reco\ncommands = pytest\n")
    reqs = backend_requirements(root, wheelhouse=wheelhouse)
    assert [r.source for r in reqs] == ["setup.py extra 'reco' (build backend)"]
    (root / "tox.ini").unlink()  # no test extra declared: install_requires alone
    reqs = backend_requirements(root, wheelhouse=wheelhouse)
    assert [(r.text, r.source) for r in reqs] == [
        ("tinydep==1.0", "setup.py install_requires (build backend)")
    ]


def test_bad_setup_py_and_missing_extra_are_one_line(tmp_path, env_cache, wheelhouse):
    root = _project(tmp_path / "p")
    with pytest.raises(EnvError, match=r"setup\.py declares no extra 'nope'"):
        backend_requirements(root, extras=["nope"], wheelhouse=wheelhouse)
    (root / "setup.py").write_text("raise SystemExit('broken on purpose')\n")
    with pytest.raises(EnvError) as e:
        backend_requirements(root, wheelhouse=wheelhouse)
    assert str(e.value).startswith(
        "the build backend could not read setup.py's requirements"
    ) and "\n" not in str(e.value)
    assert backend_requirements(tmp_path / "nothing-here") == []


def _git(cwd, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


async def test_import_of_a_setup_py_project_gets_its_test_extra(
    tmp_path, env_cache, wheelhouse, sandbox_provider, monkeypatch
):
    import difflib

    monkeypatch.setenv("INHABIT_WHEELHOUSE", str(wheelhouse))  # task check builds it offline

    repo = _project(tmp_path / "repos" / "acme__quad")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    diff = "".join(
        difflib.unified_diff(CODE.splitlines(True), FIXED.splitlines(True), "a/quad.py", "b/quad.py")
    )
    inst = {
        "instance_id": "acme__quad-1", "repo": "acme/quad", "base_commit": _git(repo, "rev-parse", "HEAD"),
        "problem_statement": "quadruple(3) returns 9.", "patch": diff, "test_patch": "",
        "FAIL_TO_PASS": ["tests/test_quad.py::test_quadruple"], "PASS_TO_PASS": ["tests/test_quad.py::test_dep"],
    }  # fmt: skip
    other = {**inst, "instance_id": "acme__quad-2", "python": "3.99"}
    number = {**inst, "instance_id": "acme__quad-3", "python": 3.10}
    data = tmp_path / "instances.jsonl"
    data.write_text("".join(json.dumps(i) + "\n" for i in (inst, other, number)))
    report = import_swebench(data, tmp_path / "repos", tmp_path / "out", wheelhouse=wheelhouse)
    assert report.tasks == ["acme__quad-1", "acme__quad-2", "acme__quad-3"] and not report.skipped
    got = report.environments["acme__quad-1"]
    assert got.startswith("sha256:") and got.endswith(")") and "(python 3." in got
    assert report.environments["acme__quad-2"].startswith(
        "none: Python 3.99 is not installed on this machine"
    )
    assert (
        report.environments["acme__quad-3"]
        == 'none: the python field must be a string such as "3.10", not 3.1'
    )
    task = load_task(tmp_path / "out" / "acme__quad-1")
    assert "tinydep==1.0" in task.environment_lock.read_text()
    check = await check_task(task.root, sandbox_provider)
    assert check.valid, check.problem_lines()
