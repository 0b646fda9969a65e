"""The sandbox interface: what every backend (bwrap, process, remote) provides.

A sandbox is an isolated workspace the agent acts on: a directory tree it can read and write
(the workspace, mounted at `/home/dev/project` inside isolating backends: a repository in a
developer's home, `WORKSPACE_MOUNT`), plus the ability to run commands there under limits. Paths
given to file operations are relative to the workspace root (absolute paths under
`WORKSPACE_MOUNT` are accepted too, on every backend); any path that escapes it raises
`PathOutsideWorkspace`, an old-style `/workspace/x` included.

This module protects nothing by itself: isolation is each backend's job, and each backend's
docstring says what it does and does not protect against.
"""

from __future__ import annotations

import abc
import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field

from inhabit.config import Config
from inhabit.errors import SandboxError, SandboxNotFound

# Where the repository appears inside a sandbox, for the agent's commands and the grader's alike:
# under the default machine profile's home (`MachineProfile.home`, user `dev`). Fixed rather than
# derived from the profile, so the path a model writes means the same workspace to every layer
# that normalises paths (file tools, env server, backends) without knowing the profile in force.
WORKSPACE_MOUNT = "/home/dev/project"


# Upper bounds that no real limit reaches: past them a value is a mistake (1e30 MB of memory is
# "no limit" by accident), refused with a validation error instead of silently not limiting.
MAX_TIMEOUT_S = 7 * 24 * 3600.0
_MAX_MEMORY_MB = 4 * 1024 * 1024  # 4 TiB
_MAX_DISK_MB = 64 * 1024 * 1024  # 64 TiB


class SandboxLimits(Config):
    """Resource limits applied to everything run inside one sandbox."""

    # Defaults that real test suites fit: CPython's test_subprocess starts 100 processes at once
    # (about 1.5 GB of Python interpreters), numpy/torch start a thread per core.
    memory_mb: int = Field(
        4096, ge=16, le=_MAX_MEMORY_MB, description="Address-space / cgroup memory cap per sandbox."
    )
    max_processes: int = Field(
        1024, ge=4, le=4_194_304, description="Processes/threads the sandbox may hold at once."
    )
    cpu_time_s: int = Field(
        600, ge=1, le=int(MAX_TIMEOUT_S), description="CPU seconds per exec (RLIMIT_CPU)."
    )
    default_timeout_s: float = Field(
        60.0, gt=0, le=MAX_TIMEOUT_S, description="Wall-clock limit of an exec when none is given."
    )
    max_timeout_s: float = Field(
        3600.0, gt=0, le=MAX_TIMEOUT_S, description="Upper bound on any exec's timeout_s."
    )
    output_bytes: int = Field(
        1_000_000, ge=1024, le=2**30, description="Cap on captured stdout and on stderr, each."
    )
    disk_mb: int = Field(
        1024, ge=1, le=_MAX_DISK_MB, description="Cap on bytes written into the workspace (file size limit)."
    )


@dataclass(frozen=True)
class ExecResult:
    """Outcome of one command run in a sandbox."""

    exit_code: int
    """Process exit code; negative -N when killed by signal N (as subprocess reports it)."""
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    limit_hit: str = ""
    """Empty, or a sentence naming the sandbox limit that stopped the command and what it is
    (memory, time, CPU time, file size), for the agent's observation."""
    output_order: tuple[tuple[int, int], ...] = field(default=(), repr=False, compare=False)
    """(fd, characters) runs, fd 1 = stdout and 2 = stderr, in the order the output arrived, so
    that stdout and stderr can be replayed interleaved. Empty where a backend does not record it."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


@dataclass(frozen=True)
class FileEntry:
    """One entry of a workspace listing; `path` is relative to the workspace root, '/'-separated."""

    path: str
    kind: Literal["file", "dir", "symlink"]
    size: int = 0


@dataclass
class SandboxInfo:
    """Descriptive facts about a live sandbox (for logs, the env server and debugging)."""

    sandbox_id: str
    backend: str
    isolated: bool
    limits: SandboxLimits = field(default_factory=SandboxLimits)


def exec_timeout(timeout_s: float | None, limits: SandboxLimits) -> float:
    """The wall-clock limit of a command: `timeout_s` (None or 0: the default), at most the maximum."""
    return min(timeout_s or limits.default_timeout_s, limits.max_timeout_s)


@dataclass(frozen=True)
class ExecCall:
    """One `Sandbox.exec` call's arguments, as every backend receives them (`Sandbox.run_exec`)."""

    command: str | list[str]
    """A shell string, or the argv list (a copy of the caller's sequence)."""
    timeout_s: float | None
    env: Mapping[str, str] | None
    cwd: str
    stdin: bytes | None

    @property
    def argv(self) -> list[str]:
        """What to start: `/bin/sh -c` for a shell string; SandboxError for an empty argv list."""
        argv = ["/bin/sh", "-c", self.command] if isinstance(self.command, str) else list(self.command)
        if not argv:
            raise SandboxError("empty command: give a shell string or a non-empty argv list")
        return argv

    def timeout(self, limits: SandboxLimits) -> float:
        return exec_timeout(self.timeout_s, limits)


class WarmUnavailable(SandboxError):
    """This test run cannot be warm: run it cold. The message is the reason (callers count it)."""


class Sandbox(abc.ABC):
    """One isolated workspace. Use as `async with` so `close()` always runs."""

    sandbox_id: str

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
        stdin: bytes | None = None,
    ) -> ExecResult:
        """Run `command` (a shell string via `sh -c`, or an argv list) in the workspace.

        A command past its timeout is killed together with every process it started, and the
        result says `timed_out`. Output beyond the limit is cut and flagged, never buffered whole.
        Backends implement `run_exec`; this signature is written once, here.
        """
        command = command if isinstance(command, str) else list(command)
        return await self.run_exec(ExecCall(command, timeout_s, env, cwd, stdin))

    @abc.abstractmethod
    async def run_exec(self, call: ExecCall) -> ExecResult:
        """The backend's `exec` (`call.argv` and `call.timeout(limits)` are the shared rules)."""

    @abc.abstractmethod
    async def read_file(self, path: str) -> bytes:
        """Return a workspace file's bytes (FileNotFoundError if absent)."""

    @abc.abstractmethod
    async def write_file(self, path: str, data: bytes | str) -> None:
        """Create or replace a workspace file, creating parent directories."""

    @abc.abstractmethod
    async def delete_file(self, path: str) -> None:
        """Remove a workspace file or directory tree (no error if absent)."""

    @abc.abstractmethod
    async def list_files(self, path: str = ".", *, recursive: bool = True) -> list[FileEntry]:
        """List entries under `path` (sorted by path)."""

    async def workspace_digest(
        self, *, max_entries: int, max_bytes: int, head_only: dict[bytes, int] | None = None
    ) -> str | None:
        """A digest of the whole workspace as it is on disk (`hostfs.tree_digest`: names, types,
        permission bits, bytes), taken while no command runs; None where this backend does not
        give one (no isolation, or files on another machine) or the tree has what a digest could
        miss. `inhabit.grading.gradecache` keys gradings by it."""
        return None

    @abc.abstractmethod
    async def snapshot(self) -> str:
        """Freeze the current workspace state and return an id that `restore` and pools accept."""

    @abc.abstractmethod
    async def restore(self, snapshot_id: str) -> None:
        """Return the workspace to a snapshot's state (processes started since are killed)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Kill every process in the sandbox and free its resources. Idempotent."""

    @property
    @abc.abstractmethod
    def info(self) -> SandboxInfo:
        """Backend name, isolation flag and limits of this sandbox."""

    def warm_tests_unavailable(self) -> str | None:
        """Why `exec_pytest` cannot run here, or None where it may (see `inhabit.sandbox.warm`)."""
        return "the sandbox backend has no warm test runner"

    async def exec_pytest(
        self,
        command: Any,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        unset: Sequence[str],
        override: Mapping[str, str],
        timeout_s: float,
    ) -> ExecResult:
        """Run a `PytestCommand` (`inhabit.sandbox.warm`) with pytest arguments `args` in a warm
        worker, as `exec` would run it cold: the exec's environment plus `env`, less the names in
        `unset`, plus `override`, then the command's own assignments. Raises WarmUnavailable
        (before anything ran) where the run must be cold."""
        raise WarmUnavailable(self.warm_tests_unavailable() or "no warm test runner")

    async def __aenter__(self) -> Sandbox:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SandboxProvider(abc.ABC):
    """Creates sandboxes: from a host directory (copied/layered, never modified) or a snapshot id."""

    @abc.abstractmethod
    async def create(
        self, source: str | Path, *, limits: SandboxLimits | None = None, env: str | Path | None = None
    ) -> Sandbox:
        """`source` is a host directory path or a snapshot id returned by `Sandbox.snapshot()`.

        `env`: a built task environment (a host directory from `inhabit.envs`), shown read-only at
        the machine profile's `env_dir` with its bin first on PATH, so `python` is its interpreter;
        None: inhabit's own Python, as without environments."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Close every sandbox this provider created and drop its snapshots."""


async def create_sandbox(
    provider: SandboxProvider,
    source: str | Path,
    *,
    limits: SandboxLimits | None = None,
    env: str | Path | None = None,
) -> Sandbox:
    """`provider.create`, naming `env` only when there is one: a provider written before task
    environments (a test's fake, a wrapper) serves every task without one exactly as before."""
    if env is None:
        return await provider.create(source, limits=limits)
    return await provider.create(source, limits=limits, env=env)


def check_env_dir(env: str | Path | None) -> Path | None:
    """`env` as an absolute path after checking it is a built environment (a venv with bin/python)."""
    if env is None:
        return None
    path = Path(env).resolve()
    if not (path / "bin" / "python").exists() or not (path / "pyvenv.cfg").is_file():
        raise SandboxError(f"{env} is not a built environment (no bin/python and pyvenv.cfg): build it first")
    return path


_Source = TypeVar("_Source")


def resolve_source(
    source: str | Path, snapshots: Mapping[str, _Source], from_directory: Callable[[Path], _Source]
) -> _Source:
    """What `SandboxProvider.create(source)` starts from: one of the provider's snapshot ids, or a
    host directory (`from_directory` turns it into the provider's own form). Typed errors otherwise."""
    key = str(source)
    if key in snapshots:
        return snapshots[key]
    path = Path(source)
    if path.is_dir():
        return from_directory(path)
    if key.startswith("snap-"):
        raise SandboxNotFound(f"unknown snapshot id {key!r}: it was made by another provider or dropped")
    raise SandboxError(f"{key!r} is neither a directory nor a snapshot id of this provider")


def limit_message(
    exit_code: int,
    timed_out: bool,
    timeout_s: float,
    limits: SandboxLimits,
    oom_kills: int = 0,
    pids_refused: int = 0,
) -> str:
    """Which limit stopped a command, in words an agent can act on ("" when none did).

    `exit_code` is ExecResult's (-N for signal N); `oom_kills` counts processes the memory
    limit killed during the command, `pids_refused` the forks the process limit refused (both
    from the cgroup; 0 where not known). A refused fork is reported only when the command failed.
    """
    if timed_out:
        return (
            f"time limit: the command ran past its {timeout_s:g} s wall-clock limit and was killed "
            "with everything it started; run less at once or make it faster"
        )
    if oom_kills:
        who = "a process was" if oom_kills == 1 else f"{oom_kills} processes were"
        return (
            f"memory limit: the sandbox's {limits.memory_mb} MB of memory (for all its processes "
            f"together) ran out and {who} killed (SIGKILL, exit status 137); use less memory, "
            "e.g. run fewer tests or processes at once"
        )
    if exit_code == -signal.SIGXCPU:
        return (
            f"CPU time limit: the command used {limits.cpu_time_s} s of CPU time (the soft "
            "RLIMIT_CPU; `ulimit -S -t` in the command raises it) and got SIGXCPU"
        )
    if exit_code == -signal.SIGXFSZ:
        return (
            f"file size limit: a file reached {limits.disk_mb} MB (RLIMIT_FSIZE) and the writer got SIGXFSZ"
        )
    if pids_refused and exit_code != 0:
        times = "once" if pids_refused == 1 else f"{pids_refused} times"
        return (
            f"process limit: the sandbox may hold {limits.max_processes} processes and threads at "
            f"once; starting another was refused {times} (fork/clone: EAGAIN, 'Resource temporarily "
            "unavailable'); start fewer at once"
        )
    return ""
