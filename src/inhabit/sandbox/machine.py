"""The machine a sandbox looks like from inside: host name, user, home, login environment.

A model notices when its environment differs from a developer's machine (a host called
`sandbox`, `HOME=/tmp`, a bare /etc) and may then behave differently. `MachineProfile` (the
`[sandbox.machine]` table) describes an ordinary machine instead; the bwrap backend builds all
of it (hostname, /etc/passwd and group entries, /etc/os-release, hosts, CA certificates, a home
directory at /home/<user>, a 1777 /dev/shm; as root also the interpreter and venv at neutral
paths, `inhabit.sandbox.pyview`). The repository is at /home/dev/project (`WORKSPACE_MOUNT`): a
fixed path, inside the home of the default user `dev`; a profile with another user keeps it there. The process backend runs on the host as the host
user, so it can only set the login environment (HOME stays its private directory).
"""

from __future__ import annotations

import functools
import shutil

from pydantic import Field

from inhabit.config import Config

_NAME = r"^[a-z_][a-z0-9_-]{0,31}$"
_HOST = r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$"
# Under /opt or /srv: nowhere the sandbox puts something else (/home, /tmp, /etc, read-only /usr).
_PLACE = r"^/(opt|srv)(/[A-Za-z0-9._-]+)+$"
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"


class MachineProfile(Config):
    """How the sandbox presents itself: an ordinary developer's machine."""

    hostname: str = Field("devbox", pattern=_HOST, description="Host name (uname, /etc/hostname, hosts).")
    user: str = Field("dev", pattern=_NAME, description="Login name of the user commands run as.")
    uid: int = Field(1000, ge=1, le=60000, description="That user's uid inside the sandbox.")
    gid: int = Field(1000, ge=1, le=60000, description="That user's primary gid inside the sandbox.")
    shell: str = Field(
        "",
        description="Login shell (passwd, SHELL); default /bin/bash where the host has bash, else /bin/sh.",
    )
    term: str = Field("xterm-256color", description="TERM of commands.")
    lang: str = Field("C.UTF-8", description="LANG of commands (a locale every glibc has).")
    extra_env: dict[str, str] = Field(
        default_factory=dict, description="More environment variables every command gets."
    )
    python_dir: str = Field(
        "/opt/python", pattern=_PLACE, description="Where the interpreter's prefix appears (bwrap, as root)."
    )
    venv_dir: str = Field(
        "/opt/venv", pattern=_PLACE, description="Where the virtual environment appears (bwrap, as root)."
    )
    env_dir: str = Field(
        "/opt/env",
        pattern=_PLACE,
        description="Where a task's test environment appears, read-only, first on PATH (bwrap).",
    )
    host_python_links: bool = Field(
        True,
        description="Symlink the interpreter's and venv's host paths to those places, so commands "
        "written with host paths (sys.executable, built tasks' test commands) run unchanged.",
    )

    @property
    def home(self) -> str:
        return f"/home/{self.user}"

    def login_shell(self) -> str:
        return self.shell or _default_shell()

    def environment(self, path: str, home: str | None = None) -> dict[str, str]:
        """A login-like environment: what `env` shows after logging in (plus `extra_env`)."""
        return {
            "HOME": home or self.home,
            "USER": self.user,
            "LOGNAME": self.user,
            "SHELL": self.login_shell(),
            "TERM": self.term,
            "LANG": self.lang,
            "PATH": path,
            **self.extra_env,
        }


@functools.cache
def _default_shell() -> str:
    """bash where the system has it, else sh: looked up once (every exec's environment names it)."""
    return "/bin/bash" if shutil.which("bash", path="/usr/bin:/bin") else "/bin/sh"


def system_path(first: list[str] | None = None) -> str:
    """PATH: `first` (e.g. a venv's bin) ahead of the usual system directories."""
    return ":".join([*(first or []), _SYSTEM_PATH])
