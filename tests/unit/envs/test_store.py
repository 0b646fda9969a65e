"""Locking and building environments offline from a wheel made in the test: pins with hashes,
one environment per id however many builders ask at once, nothing left by a failed build,
one clear line for each kind of bad input."""

from __future__ import annotations

import threading

import pytest

from inhabit.envs.lock import env_id, lock_requirements
from inhabit.envs.requirements import Requirement
from inhabit.envs.store import EnvStore
from inhabit.errors import EnvBuildError, EnvError


def _lock(tmp_path, wheelhouse, reqs=("tinydep",)):
    text = lock_requirements([Requirement(r, "test") for r in reqs], wheelhouse=wheelhouse)
    path = tmp_path / "requirements.lock"
    path.write_text(text)
    return path, env_id(_py(), text.encode())


def _py():
    from inhabit.envs.lock import own_python

    return own_python()


def test_lock_pins_every_package_with_hashes_and_adds_pytest(tmp_path, env_cache, wheelhouse):
    path, _ = _lock(tmp_path, wheelhouse)
    lines = path.read_text().splitlines()
    pins = [ln.split(" ")[0] for ln in lines if "==" in ln]
    assert "tinydep==1.0" in pins and any(p.startswith("pytest==") for p in pins)
    assert all(">=" not in p and "<" not in p for p in pins)
    assert sum("--hash=sha256:" in ln for ln in lines) >= len(pins)


def test_build_once_then_reuse_and_the_env_has_the_locked_packages(tmp_path, env_cache, wheelhouse):
    import subprocess

    path, eid = _lock(tmp_path, wheelhouse)
    store = EnvStore(tmp_path / "store")
    first = store.ensure(eid, path, wheelhouse=wheelhouse)
    assert not first.reused and first.install_s > 0 and first.path == store.path(eid)
    again = store.ensure(eid, path, wheelhouse=wheelhouse)
    assert again.reused and again.install_s == 0.0 and again.path == first.path
    out = subprocess.run(
        [str(first.path / "bin" / "python"), "-c", "import tinydep, pytest, sys; print(tinydep.double(4), sys.prefix)"],
        capture_output=True, text=True, check=True, env={"PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.stdout.split()[0] == "8"
    assert [e.env_id for e in store.list()] == [eid]
    assert not (first.path / "bin" / "python").parent.stat().st_mode & 0o222  # read-only on the host


def test_two_concurrent_builds_give_one_environment(tmp_path, env_cache, wheelhouse):
    path, eid = _lock(tmp_path, wheelhouse)
    store = EnvStore(tmp_path / "store")
    results, errors = [], []

    def build():
        try:
            results.append(EnvStore(store.root).ensure(eid, path, wheelhouse=wheelhouse))
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=build) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert sorted(r.reused for r in results) == [False, True, True]
    assert len({r.path for r in results}) == 1
    assert [p.name for p in store.root.iterdir() if not p.name.startswith(".")] == [eid.split(":")[1]]
    assert not list(store.root.glob(".building-*"))


def test_a_failed_install_leaves_no_environment(tmp_path, env_cache, wheelhouse):
    text = "tinydep==1.0 \\\n    --hash=sha256:" + "0" * 64 + "\n"
    path = tmp_path / "bad.lock"
    path.write_text(text)
    eid = env_id(_py(), text.encode())
    store = EnvStore(tmp_path / "store")
    with pytest.raises(EnvBuildError, match="hash"):
        store.ensure(eid, path, wheelhouse=wheelhouse)
    assert store.get(eid) is None and not store.path(eid).exists()
    assert not list(store.root.glob(".building-*")) and store.list() == []


def test_bad_input_is_one_clear_error(tmp_path, env_cache, wheelhouse):
    with pytest.raises(EnvError) as e:
        lock_requirements(
            [Requirement("nosuchpkg-zz>=2", "pyproject.toml extra 'tests'")], wheelhouse=wheelhouse
        )
    assert "'nosuchpkg-zz>=2' (from pyproject.toml extra 'tests') does not resolve" in str(e.value)
    path, eid = _lock(tmp_path, wheelhouse)
    store = EnvStore(tmp_path / "store")
    with pytest.raises(EnvError, match=r"lock file .* is missing"):
        store.ensure(eid, tmp_path / "gone.lock")
    path.write_text(path.read_text() + "# edited\n")
    with pytest.raises(EnvError, match="does not match environment id"):
        store.ensure(eid, path, wheelhouse=wheelhouse)
    blocker = tmp_path / "file"
    blocker.write_text("")
    path, eid = _lock(tmp_path, wheelhouse)
    with pytest.raises(EnvError, match=r"store .* cannot be created"):
        EnvStore(blocker / "store").ensure(eid, path, wheelhouse=wheelhouse)
    with pytest.raises(EnvError, match=r"wheelhouse .* is not a directory"):
        lock_requirements([], wheelhouse=tmp_path / "nope")


def test_prune_renames_before_it_deletes_and_clears_cut_removals(tmp_path, env_cache, wheelhouse):
    # A removal cut short leaves a `.removing-*` tree, never a half-deleted environment at the id's
    # path that `get` would take for finished; the next prune clears it.
    path, eid = _lock(tmp_path, wheelhouse)
    store = EnvStore(tmp_path / "store")
    built = store.ensure(eid, path, wheelhouse=wheelhouse)
    cut = store.root / f".removing-{'0' * 64}-abcd"
    (cut / "lib").mkdir(parents=True)
    (cut / "lib" / "x.py").write_text("")
    assert store.prune(keep={eid}) == [] and not cut.exists() and store.get(eid) == built.path
    assert store.prune() == [eid] and store.get(eid) is None
    assert [p.name for p in store.root.iterdir() if p.name != ".locks"] == []
