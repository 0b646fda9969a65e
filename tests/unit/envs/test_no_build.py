"""Environments are made of wheels only: a package that exists only as a source distribution is
refused while locking and while installing (its build code would run on the host), with one line
naming it and both ways out; `allow_build` is the explicit opt-in. And every lock holds a pytest
the seal plugin supports: one is added, and a project pinning one outside the range is refused."""

from __future__ import annotations

import hashlib

import pytest

from env_fixtures import write_sdist
from inhabit.envs.lock import SEAL_PYTEST, env_id, lock_requirements, own_python
from inhabit.envs.requirements import Requirement
from inhabit.envs.store import EnvStore
from inhabit.errors import EnvBuildError, EnvError


def _sdist_lock(tmp_path):
    """A wheelhouse holding only an sdist, and a lock pinning it (as a lock from elsewhere may)."""
    mark = tmp_path / "build-ran"
    sdist = write_sdist(tmp_path / "sdists", mark)
    text = f"sdonly==1.0 \\\n    --hash=sha256:{hashlib.sha256(sdist.read_bytes()).hexdigest()}\n"
    lock = tmp_path / "requirements.lock"
    lock.write_text(text)
    return sdist.parent, mark, lock, env_id(own_python(), text.encode())


def test_locking_refuses_a_package_without_a_wheel_and_runs_none_of_its_code(tmp_path, env_cache):
    wheelhouse, mark, _, _ = _sdist_lock(tmp_path)
    reqs = [Requirement("sdonly", "pyproject.toml extra 'tests'")]
    with pytest.raises(EnvError) as e:
        lock_requirements(reqs, wheelhouse=wheelhouse)
    line = str(e.value)
    assert "\n" not in line and line.startswith(
        "sdonly (required by pyproject.toml extra 'tests') has no wheel"
    )
    assert "--wheelhouse" in line and "--allow-build" in line
    assert not mark.exists()  # the build backend never ran
    text = lock_requirements(reqs, wheelhouse=wheelhouse, allow_build=True)  # the opt-in
    assert "sdonly==1.0" in text and mark.exists()


def test_installing_a_lock_that_pins_an_sdist_is_refused_unless_opted_in(tmp_path, env_cache):
    wheelhouse, mark, lock, eid = _sdist_lock(tmp_path)
    store = EnvStore(tmp_path / "store")
    with pytest.raises(
        EnvBuildError,
        match=r"^sdonly \(required by requirements.lock\) has no wheel .*--wheelhouse DIR.*--allow-build",
    ):
        store.ensure(eid, lock, wheelhouse=wheelhouse)
    assert not mark.exists() and store.get(eid) is None and not list(store.root.glob(".building-*"))
    built = store.ensure(eid, lock, wheelhouse=wheelhouse, allow_build=True)
    assert mark.exists() and (built.path / "lib").is_dir() and not built.reused


def test_the_lock_holds_a_pytest_the_seal_plugin_supports(tmp_path, env_cache, wheelhouse):
    from packaging.specifiers import SpecifierSet

    text = lock_requirements([Requirement("tinydep", "test")], wheelhouse=wheelhouse)
    pins = dict(ln.split(" ")[0].split("==") for ln in text.splitlines() if "==" in ln)
    for name, spec in SEAL_PYTEST:
        assert pins[name] in SpecifierSet(spec), (name, pins[name])


def test_a_project_pinning_pytest_outside_the_supported_range_is_one_line(tmp_path, env_cache, wheelhouse):
    reqs = [Requirement("tinydep", "test"), Requirement("pytest<8", "requirements-test.txt")]
    with pytest.raises(EnvError) as e:
        lock_requirements(reqs, wheelhouse=wheelhouse)
    line = str(e.value)
    assert "\n" not in line
    assert line.startswith(
        "the project requires 'pytest<8' (from requirements-test.txt), but grading's seal plugin"
    )
    assert f"needs pytest{dict(SEAL_PYTEST)['pytest']}" in line
