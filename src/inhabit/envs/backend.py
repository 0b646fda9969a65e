"""Requirements that only the project's build backend knows: `setup.py` extras and install_requires.

    reqs = backend_requirements(root, python="3.8", wheelhouse=None)

Older projects declare their test extras in `setup.py` (`extras_require={"tests": [...]}`),
which `inhabit.envs.requirements` never executes. Here the build backend answers instead:
`uv pip compile setup.py --extra NAME` asks it (PEP 517, setuptools' legacy backend when the
project names none) for the project's metadata and resolves what it declares; the requirements
the project names itself (install_requires plus that extra) are kept, each pinned to the release
that resolution chose for the task's Python (the lock then resolves them with the rest). The extras are the ones the caller names, else those tox.ini's
[testenv] installs (`extras = tests,reco`: what the project's own test runs get), else the first
of test, tests, testing, dev that setup.py declares (as for static files).

This runs the project's `setup.py` (its build backend) on the host, in a throwaway build
environment, with the interpreter of the task's Python version: use it on repositories you
trust as much as their own `pip install`. The build environment's setuptools comes from the
registry, or offline from the wheelhouse plus the setuptools that runs inhabit (repacked). A
workspace made by `git archive` has no `.git`, so setuptools_scm is told a version
(SETUPTOOLS_SCM_PRETEND_VERSION=0) rather than failing to find one.
"""

from __future__ import annotations

import configparser
import os
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

from inhabit.envs.lock import cache_dir, explain_failure, own_python, source_args, uv_binary
from inhabit.envs.pythons import find_python
from inhabit.envs.requirements import Requirement
from inhabit.envs.wheels import own_wheelhouse
from inhabit.errors import EnvError

__all__ = ["backend_requirements"]

_DEFAULT_EXTRAS = ("test", "tests", "testing", "dev")


def _tox_extras(root: Path) -> list[str]:
    """The extras tox.ini's [testenv] installs the project with (`extras = tests,reco`), or []."""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(root / "tox.ini")
    except configparser.Error:
        return []
    text = parser.get("testenv", "extras", fallback="")
    return [e for e in re.split(r"[\s,]+", text) if e and re.fullmatch(r"[A-Za-z0-9._-]+", e)]


def _compile(
    root: Path, source: str, extras: Sequence[str], interpreter: Path, wheelhouse
) -> tuple[int, str, str]:
    # Reading setup.py's metadata is a build of the repository itself (the module docstring says
    # so), which uv's wheels-only mode refuses; the requirements found here are then locked, and
    # installed, wheels-only like any others (inhabit.envs.lock).
    args = [uv_binary(), "pip", "compile", source, "--no-header", "--annotation-style", "line", "--quiet",
            "--python", str(interpreter), *source_args(wheelhouse, allow_build=True),
            "--find-links", str(own_wheelhouse(cache_dir() / "build-wheels" / own_python(), ("setuptools",)))]  # fmt: skip
    for extra in extras:
        args += ["--extra", extra]
    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_NO_PROGRESS": "1", "NO_COLOR": "1",
           "UV_PYTHON_DOWNLOADS": "never", "SETUPTOOLS_SCM_PRETEND_VERSION": "0"}  # fmt: skip
    try:
        proc = subprocess.run(
            args, cwd=root, capture_output=True, text=True, timeout=600, env=env, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise EnvError(f"the build backend of {source} ran past 600 s") from e
    return proc.returncode, proc.stdout, proc.stderr


def backend_requirements(
    root: str | Path,
    *,
    python: str | None = None,
    extras: Sequence[str] | None = None,
    wheelhouse: str | Path | None = None,
) -> list[Requirement]:
    """What the build backend of the project at `root` says it requires, with its test extra
    (see the module docstring); [] when the project has no setup.py. EnvError (one line) when
    the backend fails or a named extra does not exist."""
    root = Path(root)
    if not (root / "setup.py").is_file():
        return []
    interpreter = find_python(python or own_python())
    named = list(extras) if extras is not None else _tox_extras(root)
    tries = [named] if named else [*([e] for e in _DEFAULT_EXTRAS), []]
    for chosen in tries:
        rc, out, err = _compile(root, "setup.py", chosen, interpreter, wheelhouse)
        if rc != 0 and "Requested extra not found" in err and not named:
            continue
        if rc != 0:
            if "Requested extra not found" in err:
                raise EnvError(f"setup.py declares no extra {err.split('not found:')[-1].strip()!r}")
            line = explain_failure(err, [], wheelhouse)
            raise EnvError(f"the build backend could not read setup.py's requirements: {line}")
        what = " and ".join(repr(e) for e in chosen)
        where = (
            f"setup.py extra {what} (build backend)"
            if chosen
            else "setup.py install_requires (build backend)"
        )
        # The project's own requirements are the lines "via <project> (setup.py)"; the others
        # are what those need (the lock resolves them again).
        return [
            Requirement(ln.split("#", 1)[0].strip(), where)
            for ln in out.splitlines()
            if "(setup.py)" in ln and not ln.lstrip().startswith(("#", "-"))
        ]
    return []
