"""A task directory's environment: write its `[environment]` table, and build what it names.

    write_environment(task_root, lock_text)           # environment/requirements.lock + [environment]
    built = await task_environment(task)              # None without [environment]; else BuiltEnv

`repo_environment` is `inhabit agent --env`'s: a repository's own virtualenv, or one resolved
from what it declares. `task_environment` is what every caller that makes a task's sandboxes uses (task check, grading,
rollouts, tasks build): the store builds the environment on first use (from the registry, or the
wheelhouse of $INHABIT_WHEELHOUSE on an offline machine) and reuses it afterwards.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path
from typing import Protocol

from inhabit.envs.lock import env_id, own_python
from inhabit.envs.store import BuiltEnv, EnvStore

__all__ = ["LOCK_PATH", "repo_environment", "task_environment", "write_environment"]

LOCK_PATH = "environment/requirements.lock"
_TABLE = re.compile(r"(?ms)^\[environment\]\n.*?(?=^\[|\Z)")


def write_environment(task_root: str | Path, lock_text: str, python: str | None = None) -> str:
    """Store `lock_text` as the task's lock and point `[environment]` at it; returns the id."""
    root = Path(task_root)
    python = python or own_python()
    (root / "environment").mkdir(exist_ok=True)
    (root / LOCK_PATH).write_text(lock_text)
    eid = env_id(python, lock_text.encode())
    table = f'[environment]\npython = "{python}"\nlock = "{LOCK_PATH}"\nid = "{eid}"\n'
    toml = (root / "task.toml").read_text()
    toml = _TABLE.sub("", toml).rstrip("\n") + "\n\n" + table
    (root / "task.toml").write_text(toml)
    return eid


class EnvironmentTable(Protocol):
    """A task's `[environment]` table, as `task_environment` reads it."""

    @property
    def id(self) -> str: ...

    @property
    def python(self) -> str: ...


class TaskWithEnvironment(Protocol):
    """What `task_environment` reads of a task (`inhabit.tasks.task.Task`, a part above this one)."""

    @property
    def environment(self) -> EnvironmentTable | None: ...

    @property
    def environment_lock(self) -> Path | None: ...


def wheelhouse_from_env() -> str | None:
    """$INHABIT_WHEELHOUSE: the wheelhouse environments are built from on an offline machine."""
    return os.environ.get("INHABIT_WHEELHOUSE") or None


async def task_environment(
    task: TaskWithEnvironment,
    *,
    store: EnvStore | None = None,
    wheelhouse: str | Path | None = None,
    allow_build: bool = False,
) -> BuiltEnv | None:
    """The built environment of `task` (None when it has no `[environment]`), built if missing
    (from wheels only unless `allow_build`: see `inhabit.envs.lock`)."""
    spec = task.environment
    if spec is None or task.environment_lock is None:
        return None
    store = store or EnvStore()
    found = store.built(spec.id)
    if found is not None:  # the common case, without a thread hop
        return found
    return await asyncio.to_thread(
        store.ensure,
        spec.id,
        task.environment_lock,
        spec.python,
        wheelhouse=wheelhouse or wheelhouse_from_env(),
        allow_build=allow_build,
    )


def repo_environment(
    repo: str | Path,
    mode: str = "repo",
    *,
    wheelhouse: str | Path | None = None,
    store: EnvStore | None = None,
    allow_build: bool = False,
) -> tuple[Path | None, str]:
    """The environment `inhabit agent` mounts for a user's repository, and a line saying which.

    mode "repo": the repository's own virtualenv (`.venv` or `venv` with a pyvenv.cfg), else none
    (the line warns when it has the project installed editable: see `editable_installs`);
    "auto": the repository's virtualenv if it has one, else one resolved from what it declares
    (`inhabit.envs.requirements`), locked and built in the store; "none": inhabit's own Python."""
    from inhabit.envs.lock import lock_requirements
    from inhabit.envs.requirements import project_requirements
    from inhabit.errors import EnvError

    if mode not in ("repo", "auto", "none"):
        raise EnvError(f"--env {mode!r}: choose repo, auto or none")
    repo = Path(repo)
    if mode != "none":
        for name in (".venv", "venv"):
            venv = repo / name
            if (venv / "pyvenv.cfg").is_file() and (venv / "bin" / "python").exists():
                version = _venv_python(venv)
                if version != own_python():  # its interpreter is not one the sandbox shows
                    return None, (
                        f"environment: inhabit's own Python (the repository's {name} is Python "
                        f"{version or '?'}; sandboxes run {own_python()})"
                    )
                line = f"environment: the repository's {name} (read-only)"
                editable = editable_installs(venv, repo)
                if editable:
                    dist, where = editable[0]
                    line += (
                        f"; note: it has {dist} installed editable from {where} (the original checkout), "
                        "so in the sandbox its modules may load from that checkout, or fail to import, "
                        "rather than from the agent's copy (docs/environments.md, editable installs)"
                    )
                return venv.resolve(), line
    if mode != "auto":
        return None, "environment: inhabit's own Python (no .venv in the repository; --env auto resolves one)"
    reqs = project_requirements(repo)
    if not reqs:
        return None, "environment: inhabit's own Python (the repository declares no requirements)"
    wheelhouse = wheelhouse or wheelhouse_from_env()
    text = lock_requirements(reqs, wheelhouse=wheelhouse, allow_build=allow_build)
    lock = (
        (store or EnvStore()).root.parent
        / "agent-locks"
        / (env_id(own_python(), text.encode())[7:] + ".lock")
    )
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(text)
    built = (store or EnvStore()).ensure(
        env_id(own_python(), text.encode()), lock, wheelhouse=wheelhouse, allow_build=allow_build
    )
    how = "reused" if built.reused else f"built in {built.install_s:.1f}s"
    if not built.path.is_dir():
        raise EnvError(f"environment {built.env_id} vanished from the store")
    return built.path, f"environment: {built.env_id[:19]} from the repository's declarations ({how})"


def editable_installs(venv: Path, repo: Path) -> list[tuple[str, str]]:
    """(distribution, its source folder) for every editable install in `venv` whose source lies
    in `repo` (`uv sync` installs the project itself that way, as `pip install -e .` does).

    Such an install (a .pth line or an import finder) names the checkout's absolute path. The
    sandbox works on a copy of the repository at another path, so that entry is either a path the
    sandbox cannot see (bwrap: the import fails unless the copy's folder is on sys.path) or, where
    the host's files are visible (the process backend), the original checkout, imported in place of
    the agent's edits. Read from each distribution's direct_url.json (PEP 610), which pip and uv
    write for every editable install."""
    import json
    from urllib.parse import unquote, urlparse

    repo = repo.resolve()
    found = []
    for record in sorted(venv.glob("lib/python*/site-packages/*.dist-info/direct_url.json")):
        try:
            data = json.loads(record.read_text())
        except (OSError, ValueError):
            continue
        url = urlparse(str(data.get("url", "")))
        if (
            not (isinstance(data.get("dir_info"), dict) and data["dir_info"].get("editable"))
            or url.scheme != "file"
        ):
            continue
        source = Path(unquote(url.path)).resolve()
        if source == repo or repo in source.parents:
            found.append((record.parent.name.split("-")[0], str(source)))
    return found


def _venv_python(venv: Path) -> str:
    """`major.minor` of a virtualenv's interpreter, from its pyvenv.cfg ('' when it says none)."""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("version", "version_info"):
            return ".".join(value.strip().split(".")[:2])
    return ""
