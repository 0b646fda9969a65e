"""Lock a project's test requirements to exact pins (with hashes) with `uv pip compile`.

    text = lock_requirements(project_requirements(root), python="3.11", wheelhouse=None)
    env_id("3.11", text.encode())   # "sha256:...": the store's key, written to [environment] id

The lock always holds pytest (grading's seal plugin runs in the environment): when the project
does not name it, `pytest` is added, resolved like any requirement, from the registry or a
wheelhouse, and also from `own_wheelhouse` (the pytest that runs inhabit, repacked), so it
resolves offline too. Every failure is one EnvError line: a requirement that does not resolve
(named, with where the project declares it), no registry reachable and no wheelhouse (how to pass
one), uv missing.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from inhabit.envs.requirements import Requirement
from inhabit.envs.wheels import own_wheelhouse
from inhabit.errors import EnvError

__all__ = ["cache_dir", "env_id", "lock_requirements", "own_python", "uv_binary", "uv_run"]

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_NETWORK = ("Failed to fetch", "error sending request", "dns error", "Connection refused", "tcp connect error",
            "Could not connect", "network")  # fmt: skip


def own_python() -> str:
    """`major.minor` of the interpreter running inhabit: the Python every sandbox can run."""
    return f"{sys.version_info.major}.{sys.version_info.minor}"


def cache_dir() -> Path:
    """inhabit's cache directory: $INHABIT_CACHE_DIR, else $XDG_CACHE_HOME/inhabit, else ~/.cache/inhabit."""
    if os.environ.get("INHABIT_CACHE_DIR"):
        return Path(os.environ["INHABIT_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "inhabit"


def env_id(python: str, lock: bytes) -> str:
    """The content address of an environment: a digest of its Python version and its lock."""
    return "sha256:" + hashlib.sha256(f"python={python}\n".encode() + lock).hexdigest()


def uv_binary() -> str:
    """The `uv` of inhabit's installation (a dependency), else one on PATH."""
    here = Path(sys.executable).parent / "uv"
    if here.is_file():
        return str(here)
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        pass
    import shutil

    found = shutil.which("uv")
    if not found:
        raise EnvError("uv is not installed: pip install uv (it installs task environments)")
    return found


def uv_run(args: Sequence[str], *, timeout_s: float = 1800) -> subprocess.CompletedProcess[str]:
    """Run uv with `args`; its own config files are ignored so every machine resolves alike."""
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_NO_PROGRESS": "1", "NO_COLOR": "1"}
    try:
        return subprocess.run(
            [uv_binary(), *args], capture_output=True, text=True, timeout=timeout_s, env=env, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise EnvError(f"uv {args[0]} {args[1] if len(args) > 1 else ''} ran past {timeout_s:g} s") from e


def own_wheels() -> Path:
    """The wheelhouse of inhabit's own pytest (and its requirements), made once per cache dir."""
    return own_wheelhouse(cache_dir() / "own-wheels" / own_python())


def source_args(wheelhouse: str | Path | None) -> list[str]:
    """uv options for where packages come from: a wheelhouse only (offline), or the registry; both
    with inhabit's own wheels as extra find-links."""
    args = ["--find-links", str(own_wheels())]
    if wheelhouse is not None:
        if not Path(wheelhouse).is_dir():
            raise EnvError(f"wheelhouse {wheelhouse} is not a directory (give a folder of .whl files)")
        args += ["--find-links", str(wheelhouse), "--no-index", "--offline"]
    return args


def _first(stderr: str) -> str:
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("╰─▶", "Because", "×")) or "not found" in ln or "No solution" in ln:
            return ln.lstrip("╰─▶× ").strip()
    return lines[-1] if lines else "no output"


def explain_failure(stderr: str, requirements: Sequence[Requirement], wheelhouse: str | Path | None) -> str:
    """One line for a failed uv resolve or install: which requirement, or how to reach packages."""
    if wheelhouse is None and any(k.lower() in stderr.lower() for k in _NETWORK):
        return (
            "no package registry is reachable and no wheelhouse was given: pass --wheelhouse DIR "
            "(a folder of wheels, e.g. from `pip download -d DIR` on a connected machine)"
        )
    for req in requirements:
        m = _NAME.match(req.text)
        if m and re.search(rf"\b{re.escape(m.group(1))}\b", stderr, re.IGNORECASE):
            where = f"in {wheelhouse}" if wheelhouse is not None else "in the registry"
            return f"requirement {req.text!r} (from {req.source}) does not resolve {where}: {_first(stderr)}"
    return f"the requirements do not resolve: {_first(stderr)}"


def lock_requirements(
    requirements: Sequence[Requirement], *, python: str | None = None, wheelhouse: str | Path | None = None
) -> str:
    """The lock text (`name==version` with `--hash` lines) of `requirements` plus pytest."""
    python = python or own_python()
    reqs = list(requirements)
    if not any((m := _NAME.match(r.text)) and m.group(1).lower() == "pytest" for r in reqs):
        reqs.append(Requirement("pytest", "inhabit (the test runner of every environment)"))
    with tempfile.TemporaryDirectory(prefix="inhabit-lock-") as tmp:
        src = Path(tmp) / "requirements.in"
        src.write_text("".join(r.text + "\n" for r in reqs))
        args = ["pip", "compile", str(src), "--generate-hashes", "--no-header", "--no-annotate",
                "--python-version", python, "--quiet", *source_args(wheelhouse)]  # fmt: skip
        proc = uv_run(args)
    if proc.returncode != 0:
        raise EnvError(explain_failure(proc.stderr, reqs, wheelhouse))
    return proc.stdout
