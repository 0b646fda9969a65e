"""pytest fixtures for the environment tests (tests/unit/envs): a real wheel of a third-party
package made in the test (so nothing needs the network), a private inhabit cache dir, and task
directories whose tests need that package. The fixture project's files (CODE, FIXED, TESTS,
PYPROJECT) are shared with tests that build their own repositories from them. `write_sdist` makes a
package that exists only as a source distribution, whose build backend leaves a mark on the host
when it runs (what `--no-build` must prevent)."""

from __future__ import annotations

import io
import secrets
import tarfile
from pathlib import Path

import pytest

from inhabit.envs.wheels import write_wheel

__all__ = [
    "CODE",
    "FIXED",
    "PYPROJECT",
    "TESTS",
    "TINYDEP",
    "dep_task",
    "env_cache",
    "wheelhouse",
    "write_sdist",
]

TINYDEP = {
    "tinydep/__init__.py": '"""A third-party package the fixture project needs."""\n\n\ndef double(x):\n    return 2 * x\n'
}

CODE = '"""Uses a third-party package."""\n\nimport tinydep\n\n\ndef quadruple(x):\n    return tinydep.double(x) + x\n'
FIXED = CODE.replace("tinydep.double(x) + x", "tinydep.double(tinydep.double(x))")
TESTS = (
    "import tinydep\n\nfrom quad import quadruple\n\n\ndef test_quadruple():\n    assert quadruple(3) == 12\n\n\n"
    "def test_dep():\n    assert tinydep.double(2) == 4\n"
)
PYPROJECT = '[project]\nname = "quad"\nversion = "0.1"\ndependencies = []\n\n[project.optional-dependencies]\ntests = ["tinydep>=1"]\n'


_BACKEND = """import os, zipfile
NONCE = {nonce!r}  # a new archive (and hash) per call, so no cached build of an earlier one is reused
def _mark():
    with open({mark!r}, "a") as f:
        f.write("built\\n")
def get_requires_for_build_wheel(config_settings=None):
    _mark()
    return []
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    _mark()
    d = os.path.join(metadata_directory, "sdonly-1.0.dist-info")
    os.makedirs(d)
    with open(os.path.join(d, "METADATA"), "w") as f:
        f.write("Metadata-Version: 2.1\\nName: sdonly\\nVersion: 1.0\\n")
    return "sdonly-1.0.dist-info"
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _mark()
    name = "sdonly-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w") as z:
        z.writestr("sdonly/__init__.py", "VALUE = 7\\n")
        z.writestr("sdonly-1.0.dist-info/METADATA", "Metadata-Version: 2.1\\nName: sdonly\\nVersion: 1.0\\n")
        z.writestr("sdonly-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\\nGenerator: t\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n")
        z.writestr("sdonly-1.0.dist-info/RECORD", "")
    return name
"""
# Metadata left dynamic: the resolver must run the backend to learn it (as for a setup.py project).
_SDIST_PYPROJECT = """[build-system]
requires = []
build-backend = "backend"
backend-path = ["."]

[project]
name = "sdonly"
version = "1.0"
dynamic = ["dependencies"]
"""


def write_sdist(dest: Path, mark: Path) -> Path:
    """`sdonly-1.0.tar.gz` in `dest`: a source distribution only, whose in-tree build backend
    appends to `mark` whenever it runs (on the host: nothing isolates a build)."""
    dest.mkdir(parents=True, exist_ok=True)
    files = {
        "sdonly-1.0/pyproject.toml": _SDIST_PYPROJECT,
        "sdonly-1.0/backend.py": _BACKEND.format(nonce=secrets.token_hex(8), mark=str(mark)),
    }
    path = dest / "sdonly-1.0.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture(scope="session")
def wheelhouse(tmp_path_factory) -> Path:
    """A folder holding one real wheel, tinydep 1.0, written here (no network)."""
    wh = tmp_path_factory.mktemp("wheelhouse")
    write_wheel(wh, "tinydep", "1.0", TINYDEP)
    return wh


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("inhabit-cache")


@pytest.fixture
def env_cache(_session_cache, monkeypatch) -> Path:
    """inhabit's cache dir for this test session (the store and inhabit's own wheels live there)."""
    monkeypatch.setenv("INHABIT_CACHE_DIR", str(_session_cache))
    return _session_cache


def write_quad_task(root: Path) -> Path:
    """The fixture project as a task directory (no [environment] yet), with its reference fix."""
    import difflib

    from inhabit.tasks.build import write_task

    root = write_task(
        root,
        id="quad-001",
        instruction="tests/test_quad.py::test_quadruple fails. Fix quad.py.",
        workspace={"quad.py": CODE, "tests/test_quad.py": TESTS, "pyproject.toml": PYPROJECT},
        fail_to_pass=["tests/test_quad.py::test_quadruple"],
        pass_to_pass=["tests/test_quad.py::test_dep"],
        command="PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider",
    )
    diff = difflib.unified_diff(
        CODE.splitlines(keepends=True), FIXED.splitlines(keepends=True), "a/quad.py", "b/quad.py"
    )
    (root / "reference.patch").write_text("".join(diff))
    return root


@pytest.fixture
def dep_task(tmp_path, env_cache, wheelhouse, monkeypatch):
    """write(with_env=True) -> a task directory whose tests import tinydep (locked offline; its
    environment is built from the wheelhouse, as on an offline machine)."""
    monkeypatch.setenv("INHABIT_WHEELHOUSE", str(wheelhouse))
    from inhabit.envs.lock import lock_requirements
    from inhabit.envs.requirements import project_requirements
    from inhabit.envs.task_env import write_environment

    def write(with_env: bool = True, name: str = "t") -> Path:
        root = write_quad_task(tmp_path / name)
        if with_env:
            reqs = project_requirements(root / "workspace")
            write_environment(root, lock_requirements(reqs, wheelhouse=wheelhouse))
        return root

    return write
