"""Find the interpreter an environment names: `find_python("3.8")` -> /path/to/python3.8.

A task's `[environment] python` (or an imported instance's `python` field, or `--python`) is a
`major.minor` version. The environment is built with that interpreter when this machine has it:
  * inhabit's own interpreter, when the version is its own;
  * pyenv's versions folder ($PYENV_ROOT/versions, else ~/.pyenv/versions), the newest patch
    release of that minor version;
  * uv's discovery (`uv python find`: PATH, uv-managed installs), never downloading one.
Otherwise one EnvError line says so and how to get it. Versions older than 3.8 are refused:
grading's pytest plugin uses audit hooks (`sys.addaudithook`, new in 3.8).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from inhabit.errors import EnvError

__all__ = ["MIN_PYTHON", "find_python", "python_version"]

MIN_PYTHON = (3, 8)
_VERSION = re.compile(r"^(\d+)\.(\d+)$")


def python_version(text: str) -> str:
    """`text` checked as a `major.minor` version an environment can use; returns it."""
    m = _VERSION.match(text.strip())
    if not m:
        raise EnvError(f"Python version {text!r} is not major.minor (e.g. 3.8)")
    if (int(m.group(1)), int(m.group(2))) < MIN_PYTHON:
        raise EnvError(
            f"Python {text} is too old for a task environment: grading's pytest plugin needs "
            f"{MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer (audit hooks)"
        )
    return text.strip()


def _pyenv(version: str) -> Path | None:
    root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv") / "versions"
    if not root.is_dir():
        return None
    found = []
    for d in root.iterdir():
        m = re.match(rf"^{re.escape(version)}\.(\d+)$", d.name)  # 3.8.18, not 3.8-dev or 3.8.18t
        exe = d / "bin" / f"python{version}"
        if m and exe.is_file() and os.access(exe, os.X_OK):
            found.append((int(m.group(1)), exe))
    return max(found)[1] if found else None


def _uv_find(version: str) -> Path | None:
    from inhabit.envs.lock import uv_binary

    env = {**os.environ, "UV_NO_CONFIG": "1", "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}
    try:
        proc = subprocess.run(
            [uv_binary(), "python", "find", "--no-project", version],
            capture_output=True, text=True, timeout=60, env=env, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    path = Path(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip() else None
    return path if path is not None and path.exists() else None


def find_python(version: str) -> Path:
    """The interpreter of Python `version` (major.minor) on this machine; EnvError when it has none."""
    version = python_version(version)
    if version == f"{sys.version_info.major}.{sys.version_info.minor}":
        return Path(getattr(sys, "_base_executable", sys.executable))
    found = _pyenv(version) or _uv_find(version)
    if found is None:
        raise EnvError(
            f"Python {version} is not installed on this machine (looked in pyenv's versions and "
            f"uv's discovery): install it (`pyenv install {version}` or `uv python install {version}`) "
            "or name another with --python"
        )
    return found
