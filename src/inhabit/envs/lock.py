"""Lock a project's test requirements to exact pins (with hashes) with `uv pip compile`.

    text = lock_requirements(project_requirements(root), python="3.11", wheelhouse=None)
    env_id("3.11", text.encode())   # "sha256:...": the store's key, written to [environment] id

The lock always holds a pytest that grading's seal plugin supports (`SEAL_PYTEST`; the plugin
runs inside the environment): the range is added to whatever the project names, so a project
without pytest gets one, resolved like any requirement from the registry or a wheelhouse, and
also from `own_wheelhouse` (the pytest that runs inhabit, repacked), so it resolves offline too;
a project that pins pytest (or pluggy) outside the range is refused with one line naming both.

Only wheels are used (`--no-build`): a package that exists only as a source distribution would
run its build code (setup.py, a build backend) on this machine while it is locked or installed,
and a lock may come from elsewhere (an env server builds the locks its clients send). Building is
an explicit opt-in (`allow_build`, `--allow-build`); the error names the package and both ways out.

Every failure is one EnvError line: a requirement that does not resolve (named, with where the
project declares it), a package without a wheel, a pytest outside the supported range, no registry
reachable and no wheelhouse (how to pass one), uv missing.
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

__all__ = [
    "ENV_ID_PATTERN",
    "SEAL_PYTEST",
    "cache_dir",
    "env_id",
    "lock_requirements",
    "own_python",
    "uv_binary",
    "uv_run",
]

# The one spelling of an environment id (`env_id`'s output): task.toml, the env server's wire
# types and the store all check against it.
ENV_ID_PATTERN = r"^sha256:[0-9a-f]{64}$"
# What grading's seal plugin (inhabit.grading.seal_plugin) runs on: it snapshots pytest's and
# pluggy's modules and reads pluggy's hook callers (`_hookimpls`, pluggy >= 1.1; pytest 8 requires
# pluggy >= 1.3). inhabit itself requires pytest >= 8 and its suite runs the plugin on that pytest;
# the next major is left out until the suite has run on it.
SEAL_PYTEST = (("pytest", ">=8,<10"), ("pluggy", ">=1.3,<2"))

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_NO_WHEEL = re.compile(r"Wheels are required for `([^`]+)`|(\S+?)==\S+ has no usable wheels")
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


def source_args(wheelhouse: str | Path | None, *, allow_build: bool = False) -> list[str]:
    """uv options for where packages come from: a wheelhouse only (offline), or the registry; both
    with inhabit's own wheels as extra find-links; wheels only unless `allow_build`."""
    args = ["--find-links", str(own_wheels())]
    if not allow_build:
        args.append("--no-build")
    if wheelhouse is not None:
        if not Path(wheelhouse).is_dir():
            raise EnvError(f"wheelhouse {wheelhouse} is not a directory (give a folder of .whl files)")
        args += ["--find-links", str(wheelhouse), "--no-index", "--offline"]
    return args


def _first(stderr: str) -> str:
    # uv says why on a "Because ..." line (after "cause:" or a "╰─▶" mark, by version); that
    # beats its headline "No solution found".
    lines = [ln.strip().removeprefix("cause:").lstrip("╰─▶× ").strip() for ln in stderr.splitlines()]
    lines = [ln for ln in lines if ln]
    for ln in lines:
        if ln.startswith("Because"):
            return ln
    for ln in lines:
        if "not found" in ln or "No solution" in ln:
            return ln
    return lines[-1] if lines else "no output"


def explain_failure(stderr: str, requirements: Sequence[Requirement], wheelhouse: str | Path | None) -> str:
    """One line for a failed uv resolve or install: which requirement, or how to reach packages."""
    no_wheel = _NO_WHEEL.search(stderr)
    if no_wheel:
        name = no_wheel.group(1) or no_wheel.group(2)
        named = [r for r in requirements if _name(r) == re.sub(r"[-_.]+", "-", name).lower()]
        where = f" (required by {named[0].source})" if named else ""
        return (
            f"{name}{where} has no wheel {'in ' + str(wheelhouse) if wheelhouse is not None else 'in the registry'}, "
            "only a source distribution, and building it would run its code on this machine: put a wheel "
            "of it (pip wheel on a trusted machine) in a folder and pass --wheelhouse DIR, or opt in to "
            "building with --allow-build"
        )
    conflict = _seal_conflict(stderr, requirements)
    if conflict:
        return conflict
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


def _name(req: Requirement) -> str:
    m = _NAME.match(req.text)
    return re.sub(r"[-_.]+", "-", m.group(1)).lower() if m else ""


_SEAL_SOURCE = "inhabit (grading's seal plugin supports these)"


def _seal_conflict(stderr: str, requirements: Sequence[Requirement]) -> str:
    """The line for a resolve that failed because the project's pytest or pluggy is outside
    `SEAL_PYTEST` ('' when that is not why)."""
    for name, spec in SEAL_PYTEST:
        theirs = [r for r in requirements if _name(r) == name and r.source != _SEAL_SOURCE]
        if theirs and re.search(rf"\b{name}\b", stderr, re.IGNORECASE):
            return (
                f"the project requires {theirs[0].text!r} (from {theirs[0].source}), but grading's seal "
                f"plugin needs {name}{spec}: require a {name} in that range ({_first(stderr)})"
            )
    return ""


def lock_requirements(
    requirements: Sequence[Requirement],
    *,
    python: str | None = None,
    wheelhouse: str | Path | None = None,
    allow_build: bool = False,
) -> str:
    """The lock text (`name==version` with `--hash` lines) of `requirements` plus a pytest the
    seal plugin supports; wheels only unless `allow_build` (see the module docstring)."""
    python = python or own_python()
    reqs = list(requirements)
    reqs += [Requirement(name + spec, _SEAL_SOURCE) for name, spec in SEAL_PYTEST]
    with tempfile.TemporaryDirectory(prefix="inhabit-lock-") as tmp:
        src = Path(tmp) / "requirements.in"
        src.write_text("".join(r.text + "\n" for r in reqs))
        args = ["pip", "compile", str(src), "--generate-hashes", "--no-header", "--no-annotate",
                "--python-version", python, "--quiet", *source_args(wheelhouse, allow_build=allow_build)]  # fmt: skip
        proc = uv_run(args)
    if proc.returncode != 0:
        raise EnvError(explain_failure(proc.stderr, reqs, wheelhouse))
    return proc.stdout
