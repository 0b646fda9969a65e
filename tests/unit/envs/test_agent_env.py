"""`inhabit agent --env`: the repository's own virtualenv (mounted read-only), one resolved from
what the repository declares, or inhabit's Python; and the sandbox's `python` is that environment."""

from __future__ import annotations

import subprocess

import pytest

from env_fixtures import CODE, PYPROJECT, TESTS
from inhabit.envs.lock import uv_binary
from inhabit.envs.task_env import repo_environment
from inhabit.errors import EnvError
from inhabit.sandbox.base import create_sandbox


def _repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "quad.py").write_text(CODE)
    (repo / "tests" / "test_quad.py").write_text(TESTS)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    return repo


async def test_auto_resolves_the_declared_requirements_and_none_means_inhabits_python(
    tmp_path, env_cache, wheelhouse, sandbox_provider
):
    repo = _repo(tmp_path)
    path, line = repo_environment(repo, "auto", wheelhouse=wheelhouse)
    assert path is not None and "from the repository's declarations" in line
    async with await create_sandbox(sandbox_provider, repo, env=path) as sb:
        res = await sb.exec("python -m pytest -q -p no:cacheprovider tests 2>&1 | tail -1")
        assert "1 failed, 1 passed" in res.stdout, res  # tinydep imports; quadruple's bug shows
    assert repo_environment(repo, "repo") == (
        None,
        "environment: inhabit's own Python (no .venv in the repository; --env auto resolves one)",
    )
    assert repo_environment(repo, "none")[0] is None
    with pytest.raises(EnvError, match="choose repo, auto or none"):
        repo_environment(repo, "yes")


async def test_the_repositorys_own_venv_is_used(tmp_path, wheelhouse, sandbox_provider):
    repo = _repo(tmp_path)
    uv = uv_binary()
    subprocess.run([uv, "venv", "-q", str(repo / ".venv")], check=True)
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(repo / ".venv" / "bin" / "python"), "--no-index",
         "--find-links", str(wheelhouse), "tinydep"],
        check=True,
    )  # fmt: skip
    path, line = repo_environment(repo, "auto")
    assert path == (repo / ".venv").resolve() and line == "environment: the repository's .venv (read-only)"
    async with await create_sandbox(sandbox_provider, repo, env=path) as sb:
        res = await sb.exec("python -c 'import tinydep; print(tinydep.double(21))'")
        assert res.stdout.strip() == "42", res


def test_a_venv_of_another_python_is_not_mounted_and_the_line_says_why(tmp_path):
    repo = _repo(tmp_path)
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").write_text("")
    (repo / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.8.18\n")
    path, line = repo_environment(repo, "repo")
    assert path is None and "the repository's .venv is Python 3.8; sandboxes run 3." in line


_EDITABLE_BACKEND = """import os, zipfile
_META = "Metadata-Version: 2.1\\nName: edq\\nVersion: 0.1\\n"
_WHEEL = "Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    name = "edq-0.1-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        z.writestr("_edq.pth", os.path.abspath("src") + "\\n")  # as hatchling and uv_build write it
        z.writestr("edq-0.1.dist-info/METADATA", _META)
        z.writestr("edq-0.1.dist-info/WHEEL", _WHEEL)
        z.writestr("edq-0.1.dist-info/RECORD", "")
    return name
"""


def _editable_repo(root):
    """A src-layout project whose .venv (made by uv) has it installed editable, as `uv sync` does."""
    (root / "src" / "edq").mkdir(parents=True)
    (root / "src" / "edq" / "__init__.py").write_text('WHERE = "original"\n')
    (root / "backend.py").write_text(_EDITABLE_BACKEND)
    (root / "pyproject.toml").write_text(
        '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n\n'
        '[project]\nname = "edq"\nversion = "0.1"\n'
    )
    uv = uv_binary()
    subprocess.run([uv, "venv", "-q", str(root / ".venv")], check=True)
    subprocess.run(
        [uv, "pip", "install", "-q", "--python", str(root / ".venv" / "bin" / "python"), "--no-index", "-e", str(root)],
        check=True,
    )  # fmt: skip
    return root


def test_a_venv_with_the_project_installed_editable_is_named_in_the_line(tmp_path):
    repo = _editable_repo(tmp_path / "repo")
    path, line = repo_environment(repo, "repo")
    assert path == (repo / ".venv").resolve()
    assert line.startswith(
        "environment: the repository's .venv (read-only); note: it has edq installed editable"
    )
    assert (
        str((repo / "src").resolve()) not in line and f"from {repo.resolve()} (the original checkout)" in line
    )
    assert "\n" not in line
    other = _editable_repo(tmp_path / "other")  # an editable install of a project elsewhere: not ours
    (repo / ".venv").rename(tmp_path / "kept")
    (other / ".venv").rename(repo / ".venv")
    assert repo_environment(repo, "repo")[1] == "environment: the repository's .venv (read-only)"
