"""The environment store: one read-only virtual environment per environment id, built once.

    store = EnvStore()                                  # <cache dir>/envs (see lock.cache_dir)
    built = store.ensure(env_id, lock_path, "3.11", wheelhouse=None, allow_build=False)
    built.path, built.install_s, built.reused

Layout: `<root>/<hex of the id>/` is a finished environment (a relocatable venv made by `uv venv`,
packages installed by `uv pip install --require-hashes --no-deps --no-build` from the lock, copied
rather than linked from uv's cache, then made read-only), holding `inhabit-env.json` (id, python, install time)
and its own copy of the lock. Nothing else in the store is mistaken for an environment:

  * a build happens in `<root>/.building-<hex>-<random>/` and is renamed into place only when it
    is complete (rename is atomic on one file system); a failed or interrupted build is removed,
    or swept by the next builder of that id;
  * builders of one id take an exclusive lock (`flock` on `<root>/.locks/<hex>`), so two at once
    produce one environment: the second waits, then finds it built and reuses it.

The venv's interpreter is the one its Python version names on this machine
(`inhabit.envs.pythons.find_python`: inhabit's own, a pyenv version, or uv's discovery); sandboxes
show that interpreter's prefix read-only beside the environment.
The project under test is never installed here: the lock holds its requirements only. Wheels
only, unless the caller opts in (`allow_build`): a lock that pins a package with no wheel would
otherwise run that source distribution's build code on the host (see `inhabit.envs.lock`).
What this protects: a finished environment from half-written states and from concurrent builders.
Read-only to the code that runs in it is the sandbox's job (`--ro-bind`); on the host the files
lose their write bits, which stops a careless process, not root.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from inhabit.envs.lock import (
    ENV_ID_PATTERN,
    cache_dir,
    env_id,
    explain_failure,
    own_python,
    source_args,
    uv_run,
)
from inhabit.envs.pythons import find_python
from inhabit.envs.requirements import Requirement
from inhabit.errors import EnvBuildError, EnvError
from inhabit.filetree import remove_tree

__all__ = ["MARKER", "BuiltEnv", "EnvStore"]

MARKER = "inhabit-env.json"


@dataclass(frozen=True)
class BuiltEnv:
    """A finished environment: where it is, what it is, and what this call spent on it."""

    env_id: str
    path: Path
    python: str
    install_s: float
    reused: bool
    size_bytes: int = 0


def _hex(eid: str) -> str:
    if not re.match(ENV_ID_PATTERN, eid):
        raise EnvError(f"{eid!r} is not an environment id (sha256:<64 hex digits>)")
    return eid.partition(":")[2]


def _tree_size(path: Path) -> int:
    return sum(p.lstat().st_size for p in path.rglob("*"))


def _make_read_only(path: Path) -> None:
    for p in [*path.rglob("*"), path]:
        if p.is_symlink():
            continue
        executable = p.is_dir() or p.stat().st_mode & 0o111
        p.chmod(0o555 if executable else 0o444)


class EnvStore:
    """Content-addressed, read-only environments under `root` (default: <cache dir>/envs)."""

    def __init__(self, root: str | Path | None = None):
        self.root = Path(root) if root is not None else cache_dir() / "envs"

    def path(self, eid: str) -> Path:
        return self.root / _hex(eid)

    def get(self, eid: str) -> Path | None:
        """The finished environment of `eid`, or None."""
        path = self.path(eid)
        return path if (path / MARKER).is_file() else None

    def built(self, eid: str) -> BuiltEnv | None:
        """The finished environment of `eid` as `ensure` returns a reused one, or None."""
        path = self.get(eid)
        return self._info(eid, path, 0.0, reused=True) if path is not None else None

    def _writable(self) -> None:
        try:
            (self.root / ".locks").mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise EnvError(
                f"the environment store {self.root} cannot be created ({e.strerror}): set INHABIT_CACHE_DIR "
                "to a writable folder"
            ) from e
        if not os.access(self.root, os.W_OK) or not os.access(self.root / ".locks", os.W_OK):
            raise EnvError(
                f"the environment store {self.root} is not writable: set INHABIT_CACHE_DIR to a writable folder"
            )

    def ensure(
        self,
        eid: str,
        lock: str | Path,
        python: str | None = None,
        *,
        wheelhouse: str | Path | None = None,
        allow_build: bool = False,
    ) -> BuiltEnv:
        """The environment `eid` made from the lock file `lock`: reused when built, else built now;
        from wheels only unless `allow_build` (a source distribution's build runs on this host).

        Raises EnvError when the lock is missing or is not the one `eid` names (hash mismatch), when
        this machine has no interpreter of `python`, when the store is not writable, or when the
        install fails (nothing is left behind)."""
        python = python or own_python()
        hexid = _hex(eid)
        found = self.built(eid)
        if found is not None:
            return found
        lock = Path(lock)
        if not lock.is_file():
            raise EnvError(f"lock file {lock} is missing: run `inhabit env lock` on the task again")
        data = lock.read_bytes()
        if env_id(python, data) != eid:
            raise EnvError(
                f"{lock} does not match environment id {eid} (it hashes to {env_id(python, data)}): "
                "the lock changed after the id was written; run `inhabit env lock` again"
            )
        interpreter = find_python(python)  # before any lock or temp dir: a missing one is one line
        self._writable()
        with open(self.root / ".locks" / hexid, "w") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)  # another builder of this id: wait for it
            found = self.built(eid)
            if found is not None:
                return found
            for stale in self.root.glob(f".building-{hexid}-*"):
                remove_tree(stale)  # an interrupted build of this id (we hold its lock)
            start = time.monotonic()
            tmp = self.root / f".building-{hexid}-{secrets.token_hex(4)}"
            try:
                self._build(tmp, lock, wheelhouse, interpreter, allow_build)
                install_s = time.monotonic() - start
                (tmp / "requirements.lock").write_bytes(data)
                meta = {
                    "id": eid,
                    "python": python,
                    "install_s": round(install_s, 3),
                    "built_at": time.time(),
                }
                (tmp / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
                _make_read_only(tmp)
                tmp.rename(self.path(eid))
            except BaseException:
                remove_tree(tmp)
                raise
        return self._info(eid, self.path(eid), install_s, reused=False)

    def _build(
        self, tmp: Path, lock: Path, wheelhouse: str | Path | None, interpreter: Path, allow_build: bool
    ) -> None:
        proc = uv_run(
            ["venv", "--python", str(interpreter), "--relocatable", "--no-project", "--quiet", str(tmp)]
        )
        if proc.returncode != 0:
            raise EnvBuildError(f"uv venv failed: {' '.join(proc.stderr.strip().splitlines()[-1:])}")
        args = ["pip", "install", "--python", str(tmp / "bin" / "python"), "--no-deps", "--require-hashes",
                "--link-mode", "copy", "--quiet", "-r", str(lock),
                *source_args(wheelhouse, allow_build=allow_build)]  # fmt: skip
        proc = uv_run(args)
        if proc.returncode != 0:
            stderr = proc.stderr
            if "hash mismatch" in stderr.lower() or "hashes do not match" in stderr.lower():
                raise EnvBuildError(
                    f"a package does not match the hash in {lock.name}: {stderr.strip().splitlines()[-1]}"
                )
            reqs = [
                Requirement(ln.split(" ", 1)[0], lock.name)
                for ln in lock.read_text().splitlines()
                if "==" in ln
            ]
            raise EnvBuildError(explain_failure(stderr, reqs, wheelhouse))

    def _info(self, eid: str, path: Path, install_s: float, *, reused: bool) -> BuiltEnv:
        meta = json.loads((path / MARKER).read_text())
        return BuiltEnv(eid, path, meta.get("python", ""), install_s, reused)

    def list(self) -> list[BuiltEnv]:
        """Every finished environment, with its size and the install time it took."""
        out = []
        if self.root.is_dir():
            for path in sorted(self.root.iterdir()):
                if path.name.startswith(".") or not (path / MARKER).is_file():
                    continue
                meta = json.loads((path / MARKER).read_text())
                out.append(BuiltEnv(meta["id"], path, meta.get("python", ""), meta.get("install_s", 0.0),
                                    True, _tree_size(path)))  # fmt: skip
        return out

    def prune(self, keep: set[str] | None = None) -> list[str]:
        """Remove every environment whose id is not in `keep`, and leftovers of failed builds or
        removals; returns the removed ids. A sandbox that mounts a removed environment loses its
        files (a bind mount shares them): prune when no run uses it."""
        keep = keep or set()
        removed = []
        for env in self.list():
            if env.env_id not in keep:
                hexid = _hex(env.env_id)
                with open(self.root / ".locks" / hexid, "w") as fh:
                    fcntl.flock(fh, fcntl.LOCK_EX)
                    # Renamed away first (atomic), so a removal cut short never leaves a tree that
                    # `get` takes for finished.
                    dead = self.root / f".removing-{hexid}-{secrets.token_hex(4)}"
                    env.path.rename(dead)
                    remove_tree(dead)
                removed.append(env.env_id)
        leftovers = (
            [*self.root.glob(".building-*"), *self.root.glob(".removing-*")] if self.root.is_dir() else []
        )
        for stale in leftovers:
            hexid = stale.name.split("-")[1]
            with open(self.root / ".locks" / hexid, "w") as fh:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a build in progress
                remove_tree(stale)
        return removed
