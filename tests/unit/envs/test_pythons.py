"""Finding the interpreter an environment names: inhabit's own, a pyenv version (the newest patch
release), or one clear line when the machine has none or the version is unusable."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from inhabit.envs.pythons import find_python
from inhabit.errors import EnvError


def test_own_version_is_inhabits_interpreter():
    own = f"{sys.version_info.major}.{sys.version_info.minor}"
    found = find_python(own)
    assert found.exists() and found == Path(getattr(sys, "_base_executable", sys.executable))


def test_pyenv_versions_give_the_newest_patch_release(tmp_path, monkeypatch):
    real = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    for name in ("3.9.1", "3.9.10", "3.9.2", "3.9-dev", "3.10.4"):
        (tmp_path / "versions" / name / "bin").mkdir(parents=True)
        (tmp_path / "versions" / name / "bin" / f"python{'.'.join(name.split('.')[:2])}").symlink_to(real)
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))
    assert find_python("3.9") == tmp_path / "versions" / "3.9.10" / "bin" / "python3.9"


@pytest.mark.parametrize(
    ("version", "says"),
    [
        ("3.7", "too old for a task environment"),
        ("2.7", "too old"),
        ("three", "is not major.minor"),
        ("3.8.1", "is not major.minor"),
        ("3.99", "Python 3.99 is not installed on this machine"),
    ],
)
def test_unusable_versions_are_one_line(version, says, tmp_path, monkeypatch):
    monkeypatch.setenv("PYENV_ROOT", str(tmp_path))  # an empty pyenv: only uv's discovery is left
    with pytest.raises(EnvError) as e:
        find_python(version)
    assert says in str(e.value) and "\n" not in str(e.value)
