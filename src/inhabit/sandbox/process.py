"""The `process` backend: a plain subprocess in a temporary copy of the workspace. NO ISOLATION.

For platforms without namespaces (macOS, containers that forbid user namespaces). Each sandbox
is a fresh copy of the source directory on the scratch tmpfs plus a private temp directory
(`TMPDIR`) that persists across its execs; commands run as the calling user with a minimal
environment, cwd inside the copy, rlimits on address space, CPU time and file size, a wall-clock
timeout that kills the whole process group, and output capped while streaming. Snapshots are
full copies.

What it protects against: accidental damage to the source directory (the sandbox works on a
copy), runaway commands (timeouts, rlimits, output caps), file-API paths escaping the workspace.

What it does NOT protect against, at all: code reading or writing any file the calling user can
(home directory, SSH keys, other sandboxes, the source directory itself), network access, killing
or tracing the caller's other processes, fork bombs (RLIMIT_NPROC does not bind root and counts
all of a user's processes), a child that calls setsid() escaping the group kill (close() also
hunts processes by an environment marker, best effort). Use it only for trusted code; every
provider logs a WARNING saying so, and `info.isolated` is False.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import resource
import secrets
import shutil
import signal
import sys
from pathlib import Path

from inhabit.errors import SandboxError, SandboxNotFound
from inhabit.log import get_logger
from inhabit.sandbox import cleanup, hostfs, paths, signals
from inhabit.sandbox.base import (
    ExecCall,
    ExecResult,
    FileEntry,
    Sandbox,
    SandboxInfo,
    SandboxLimits,
    SandboxProvider,
    check_env_dir,
    limit_message,
    resolve_source,
)
from inhabit.sandbox.gate import Gate
from inhabit.sandbox.machine import MachineProfile
from inhabit.sandbox.runner import kill_group, run_capped

log = get_logger(__name__)

_MARKER = "INHABIT_SANDBOX_ID"


def _rlimit_preexec(limits: SandboxLimits):  # type: ignore[no-untyped-def]
    """Build a preexec function applying the cheap rlimits in the child before exec.

    CPU time and file size get soft limits under the caller's hard limits, so a process may raise
    them as on a normal login; the wall-clock timeout bounds every exec.
    """
    mem = limits.memory_mb * 1024 * 1024
    cpu = limits.cpu_time_s
    fsize = limits.disk_mb * 1024 * 1024

    def apply() -> None:
        for what, value, keep_hard in (
            (resource.RLIMIT_AS, mem, False),
            (resource.RLIMIT_CPU, cpu, True),
            (resource.RLIMIT_FSIZE, fsize, True),
            (resource.RLIMIT_CORE, 0, False),
        ):
            with contextlib.suppress(ValueError, OSError):
                hard = resource.getrlimit(what)[1] if keep_hard else value
                resource.setrlimit(what, (value, hard))

    return apply


def _own_bin() -> str:
    """The bin directory of the interpreter running inhabit (its venv's, where it runs in one)."""
    return str(Path(sys.prefix).resolve() / "bin")


def kill_marked(sandbox_id: str) -> None:
    """SIGKILL every process whose environment carries this sandbox's marker (best effort)."""
    needle = f"{_MARKER}={sandbox_id}".encode()
    me = os.getpid()
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else ():
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), signal.SIGKILL)


class ProcessSandbox(Sandbox):
    """One copy of a workspace plus a private temp dir; commands run as plain subprocesses."""

    def __init__(
        self,
        provider: ProcessSandboxProvider,
        sandbox_id: str,
        home: Path,
        limits: SandboxLimits,
        env: Path | None = None,
    ):
        self.sandbox_id = sandbox_id
        self._provider = provider
        self._home = home
        self.workspace = home / "ws"
        self.tmp = home / "tmp"
        self._limits = limits
        self._pgids: set[int] = set()
        self._closed = False
        self._gate = Gate()  # snapshot/restore copy the tree alone
        self._cleanup_handle = cleanup.register(self._cleanup_sync)
        # `python` must mean what it means in a bwrap sandbox (inhabit's interpreter, not whatever
        # the caller's PATH finds first): a portable task's command says just `python`.
        # A task environment goes first (its interpreter has the project's test requirements).
        first = [str(env / "bin")] if env is not None else []
        self._path = ":".join([*first, _own_bin(), os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")])

    @property
    def info(self) -> SandboxInfo:
        return SandboxInfo(self.sandbox_id, "process", isolated=False, limits=self._limits)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxNotFound(f"sandbox {self.sandbox_id} is closed: create a new one")

    async def run_exec(self, call: ExecCall) -> ExecResult:
        self._check_open()
        argv, env = call.argv, call.env
        host_cwd = paths.resolve(self.workspace, call.cwd)
        if not host_cwd.is_dir():
            raise SandboxError(f"cwd {call.cwd!r} is not a directory in the workspace")
        timeout = call.timeout(self._limits)
        # Of the machine profile only the login environment applies here (the process runs on
        # the host, as the host user, with the host's name and /etc); HOME is its private dir.
        login = self._provider.machine.environment(self._path, home=str(self.tmp))
        full_env = {
            **login,
            "TMPDIR": str(self.tmp),
            # As in bwrap: no .pyc in the workspace. A same-size edit within the pyc's one-second
            # mtime resolution would otherwise run stale bytecode (seen as a flaky fixed-bug test).
            "PYTHONDONTWRITEBYTECODE": "1",
            "PWD": str(host_cwd),
            **(env or {}),
            _MARKER: self.sandbox_id,
        }
        async with self._gate.shared(self._check_open):
            return await self._run(argv, full_env, host_cwd, timeout, call.stdin)

    async def _run(
        self, argv: list[str], full_env: dict[str, str], host_cwd: Path, timeout: float, stdin: bytes | None
    ) -> ExecResult:
        result = await run_capped(
            [*signals.clean_start_prefix(), *argv],
            env=full_env,
            cwd=host_cwd,
            timeout_s=timeout,
            output_bytes=self._limits.output_bytes,
            stdin=stdin,
            preexec_fn=_rlimit_preexec(self._limits),
            on_start=self._pgids.add,
            after_exit=self._after_exit,
        )
        hit = limit_message(result.exit_code, result.timed_out, timeout, self._limits)
        return dataclasses.replace(result, limit_hit=hit) if hit else result

    def _after_exit(self, pgid: int) -> None:
        kill_group(pgid)
        self._pgids.discard(pgid)

    async def read_file(self, path: str) -> bytes:
        async with self._gate.shared(self._check_open, kind="file"):
            return await asyncio.to_thread(hostfs.read_file, self.workspace, path)

    async def write_file(self, path: str, data: bytes | str) -> None:
        async with self._gate.shared(self._check_open, kind="file"):
            await asyncio.to_thread(hostfs.write_file, self.workspace, path, data)

    async def delete_file(self, path: str) -> None:
        async with self._gate.shared(self._check_open, kind="file"):
            await asyncio.to_thread(hostfs.delete, self.workspace, path)

    async def list_files(self, path: str = ".", *, recursive: bool = True) -> list[FileEntry]:
        async with self._gate.shared(self._check_open, kind="file"):
            return await asyncio.to_thread(hostfs.list_files, self.workspace, path, recursive)

    async def snapshot(self) -> str:
        self._check_open()
        async with self._gate.exclusive():
            self._check_open()
            return await asyncio.to_thread(self._provider._store_snapshot, self.workspace)

    async def restore(self, snapshot_id: str) -> None:
        self._check_open()
        src = self._provider._snapshot_path(snapshot_id)
        async with self._gate.exclusive(before_wait=self._kill_processes):
            self._check_open()
            await asyncio.to_thread(self._replace_workspace, src)

    def _replace_workspace(self, src: Path) -> None:
        hostfs.remove_tree(self.workspace)
        hostfs.copy_tree(src, self.workspace)

    def _kill_processes(self) -> None:
        for pgid in list(self._pgids):
            kill_group(pgid)
        self._pgids.clear()
        kill_marked(self.sandbox_id)

    def _cleanup_sync(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._kill_processes()
        hostfs.remove_tree(self._home)
        cleanup.unregister(self._cleanup_handle)
        self._provider._forget(self)

    async def close(self) -> None:
        if self._closed:
            return
        self._kill_processes()
        try:
            await self._gate.settle(timeout=10)  # let a snapshot copy in progress finish
        finally:
            self._cleanup_sync()


class ProcessSandboxProvider(SandboxProvider):
    """Creates `ProcessSandbox`es under a scratch directory. Logs a WARNING: it isolates nothing."""

    backend = "process"

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        scratch_dir: str | Path | None = None,
        machine: MachineProfile | None = None,
    ):
        self.limits = limits or SandboxLimits()
        self.machine = machine or MachineProfile()
        base = Path(scratch_dir) if scratch_dir else hostfs.default_scratch_dir()
        hostfs.sweep_stale(base, "inhabit-proc-")
        self.root = hostfs.make_private_dir(base, f"inhabit-proc-{os.getpid()}-")
        (self.root / "sandboxes").mkdir()
        (self.root / "snapshots").mkdir()
        self._sandboxes: dict[str, ProcessSandbox] = {}
        self._snapshots: dict[str, Path] = {}
        self._closed = False
        self._cleanup_handle = cleanup.register(self._cleanup_sync)
        log.warning(
            "sandbox backend 'process' ISOLATES NOTHING: commands run as %s with full access to "
            "this machine's files, network and processes. Use it only for trusted code; use the "
            "bwrap backend wherever it works.",
            os.environ.get("USER", f"uid {os.getuid()}"),
        )

    async def create(
        self, source: str | Path, *, limits: SandboxLimits | None = None, env: str | Path | None = None
    ) -> ProcessSandbox:
        if self._closed:
            raise SandboxError("this sandbox provider is closed: create a new one")
        env_dir = check_env_dir(env)
        src = resolve_source(source, self._snapshots, lambda p: p)
        sandbox_id = "sb-" + secrets.token_hex(6)
        home = self.root / "sandboxes" / sandbox_id
        (home / "tmp").mkdir(parents=True)
        try:
            await asyncio.to_thread(hostfs.copy_tree, src, home / "ws")
        except BaseException:
            hostfs.remove_tree(home)
            raise
        sandbox = ProcessSandbox(self, sandbox_id, home, limits or self.limits, env_dir)
        self._sandboxes[sandbox_id] = sandbox
        return sandbox

    def _store_snapshot(self, workspace: Path) -> str:
        snapshot_id = "snap-" + secrets.token_hex(6)
        dst = self.root / "snapshots" / snapshot_id
        hostfs.copy_tree(workspace, dst)
        self._snapshots[snapshot_id] = dst
        return snapshot_id

    def _snapshot_path(self, snapshot_id: str) -> Path:
        try:
            return self._snapshots[snapshot_id]
        except KeyError:
            raise SandboxNotFound(f"unknown snapshot id {snapshot_id!r}") from None

    def _forget(self, sandbox: ProcessSandbox) -> None:
        self._sandboxes.pop(sandbox.sandbox_id, None)

    def _cleanup_sync(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sandbox in list(self._sandboxes.values()):
            sandbox._cleanup_sync()
        shutil.rmtree(self.root, ignore_errors=True)
        self._snapshots.clear()
        cleanup.unregister(self._cleanup_handle)

    async def close(self) -> None:
        self._cleanup_sync()
