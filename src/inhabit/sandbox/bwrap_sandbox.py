"""One bwrap sandbox: exec (how bwrap is launched and limited), files, snapshot/restore, close.

The provider in `inhabit.sandbox.bwrap` (read its docstring for what is and is not protected)
prepares everything shared: the bwrap argv for the system view, cgroups, the sandbox host uid,
idmapped source views. This module holds the per-sandbox life cycle.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import resource
import shlex
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from inhabit.errors import SandboxError, SandboxNotFound
from inhabit.log import get_logger
from inhabit.sandbox import cleanup, hostfs, idmap, layers, mounts, paths, signals, warm
from inhabit.sandbox.base import (
    WORKSPACE_MOUNT,
    ExecCall,
    ExecResult,
    FileEntry,
    Sandbox,
    SandboxInfo,
    SandboxLimits,
    WarmUnavailable,
    exec_timeout,
    limit_message,
)
from inhabit.sandbox.gate import Gate
from inhabit.sandbox.layers import Snapshot, Volume
from inhabit.sandbox.runner import kill_group, run_capped
from inhabit.sandbox.supervisor import RequestTooLarge, Supervisor, SupervisorGone, WarmFallback

if TYPE_CHECKING:
    from inhabit.sandbox.bwrap import BwrapSandboxProvider

log = get_logger(__name__)

# How both launchers (the compiled one, `_launcher.c`, and the shell) begin the line they print
# before exiting 125 when a step before bwrap fails: no command ran.
_LAUNCH_FAILED = "inhabit: could not launch the sandbox: "


def _nproc_wrap(cmd: list[str], n: int) -> list[str]:
    """Set RLIMIT_NPROC inside the sandbox's user namespace, not on bwrap itself.

    Since Linux 5.14 the process count is kept per (user namespace, uid) and checked at every
    level: a limit set on bwrap would count all of the caller's processes on the host (one
    sandbox's fork bomb would stop every other sandbox from starting). Set from inside, it
    counts only this exec's processes. (bash spells it -u, dash -p.)
    """
    return ["/bin/sh", "-c", f'ulimit -u {n} 2>/dev/null || ulimit -p {n}; exec "$@"', "sh", *cmd]


def _rlim(value: int) -> str:
    """An rlimit value as the compiled launcher's -r reads it (`u` is unlimited)."""
    return "u" if value == resource.RLIM_INFINITY else str(value)


# The shell's `ulimit` letter and unit (bytes per unit; 1 for seconds) of each limit the root
# launchers set. dash counts file and core sizes in 512-byte blocks and -v in KiB.
_ULIMIT = {
    resource.RLIMIT_CPU: ("t", 1),
    resource.RLIMIT_CORE: ("c", 512),
    resource.RLIMIT_FSIZE: ("f", 512),
    resource.RLIMIT_AS: ("v", 1024),
}


def _ulimit_steps(limits: Sequence[tuple[int, int, int]]) -> list[str]:
    """The shell launcher's `ulimit` steps for (resource, soft, hard) limits: both at once where
    they are equal, else the hard one first (a soft limit may not exceed it)."""

    def value(v: int, unit: int) -> str:
        if v == resource.RLIM_INFINITY:
            return "unlimited"
        if v % unit:
            raise ValueError(f"rlimit {v} is not a whole number of {unit}-byte units")
        return str(v // unit)

    steps = []
    for what, soft, hard in limits:
        letter, unit = _ULIMIT[what]
        if soft == hard:
            steps.append(f"ulimit -{letter} {value(soft, unit)}")
        else:
            steps.append(
                f"ulimit -H -{letter} {value(hard, unit)} && ulimit -S -{letter} {value(soft, unit)}"
            )
    return steps


# PID 1 of every sandbox: a shell that runs the command as its child, reaps whatever is
# orphaned meanwhile (dash waits for any child), and exits with the command's status (128+N
# when signal N killed it, which bwrap would report the same way). With bwrap as PID 1 instead,
# /proc/1/cmdline would show bwrap's whole command line: host paths of the venv and scratch dir.
_INIT = ["/bin/sh", "-c", '"$@"; exit $?', "init"]


# With the provider's uid-range user namespace (`idmap.range_userns_fd`) the launcher opens it as
# fd 3 for bwrap's `--userns 3`; bwrap leaves it open in its child, so the init closes it first.
USERNS_FD = 3
_INIT_CLOSING = ["/bin/sh", "-c", f'exec {USERNS_FD}<&-; "$@"; exit $?', "init"]


def read_skeleton() -> tuple[tuple[str, bytes], ...]:
    """The distribution's skeleton files (/etc/skel: .bashrc, .profile), as (name, content); read
    once per provider, not once per sandbox."""
    skel = Path("/etc/skel")
    out = []
    if skel.is_dir():
        for f in skel.iterdir():
            if f.is_file() and not f.is_symlink():
                with contextlib.suppress(OSError):
                    out.append((f.name, f.read_bytes()))
    return tuple(out)


def _make_home(home: Path, inner_home: str, skeleton: Sequence[tuple[str, bytes]]) -> None:
    """An ordinary user's home: the skeleton files (`read_skeleton`), mode 0755, and the
    directory the repository is mounted on when that lies in it (`WORKSPACE_MOUNT`)."""
    home.mkdir(exist_ok=True)
    home.chmod(0o755)
    # bwrap would otherwise create the mount point itself, in the home bound from the host.
    if os.path.dirname(WORKSPACE_MOUNT) == inner_home:
        (home / os.path.basename(WORKSPACE_MOUNT)).mkdir(mode=0o755, exist_ok=True)
    for name, content in skeleton:
        with contextlib.suppress(OSError):
            # As write_bytes would (mode 0666 less the umask), in three system calls, not six.
            fd = os.open(home / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o666)
            try:
                os.write(fd, content)
            finally:
                os.close(fd)


def _exit_code(rc: int) -> int:
    # bwrap reports a child killed by signal N as 128+N; ExecResult wants -N.
    return -(rc - 128) if 128 < rc < 160 else rc


class BwrapSandbox(Sandbox):
    """One bwrap sandbox: a workspace (overlay or copy), a private /tmp, a cgroup, its limits."""

    def __init__(
        self,
        provider: BwrapSandboxProvider,
        sandbox_id: str,
        volume: Volume,
        limits: SandboxLimits,
        env_argv: Sequence[str] = (),
    ):
        self.sandbox_id = sandbox_id
        # A task environment: its read-only bind, and its bin ahead of everything on PATH.
        self._env_argv = list(env_argv)
        self._path_env = provider.path_env
        if self._env_argv:
            self._path_env = f"{provider.machine.env_dir}/bin:{provider.path_env}"
        self._p = provider
        self._volume = volume
        self._limits = limits
        home = volume.path
        self.tmp = home / "tmp"
        self.home = home / "home"  # the user's home directory, /home/<user> inside
        self.upper, self.work = home / "upper", home / "work"
        self.workspace = home / ("merged" if provider.overlay else "ws")
        self._stack: Snapshot | None = None  # overlay mode: the lowers now mounted
        self._held: list[Volume] = []  # volumes of `_stack`'s layers we hold references to
        self._layer_n = 0
        self._groups: list[Path] = []
        # The cgroups' OOM kills and refused forks when an exec last finished (`_run_limited`).
        self._limit_counts = (0, 0)
        self._pgids: set[int] = set()
        self._gate = Gate()
        # The supervisor (see `inhabit.sandbox.supervisor`): started by exec number
        # `provider.supervise_after + 1`, again after a snapshot/restore remount or its death.
        # `_no_supervisor` is why this sandbox cannot use one (None: it can).
        self._sup_task: asyncio.Task[Supervisor] | None = None
        self._no_supervisor: str | None = None if provider.supervise else "off"
        self._execs = 0  # started so far: the first `provider.supervise_after` take their own bwrap
        self._closed = False
        self._cleanup_handle = cleanup.register(self._cleanup_sync)

    # -- lifecycle ----------------------------------------------------------------------------

    def _setup(self, snap: Snapshot) -> None:
        for d in (self.tmp, self.upper, self.work, self.workspace, self._volume.path / "layers"):
            d.mkdir(exist_ok=True)
        os.chmod(self.tmp, 0o1777)
        _make_home(self.home, self._p.machine.home, self._p.skeleton)
        self._own(self.tmp, self.upper, self.home, *self.home.iterdir())
        if self._p.cgroups is not None:
            self._groups = self._p.cgroups.create(self.sandbox_id, self._limits)
        if self._p.overlay:
            self._mount(snap)
        else:
            src = snap.copy_dir or snap.base
            hostfs.copy_tree(src, self.workspace)
            if self._p.owner is not None and snap.copy_dir is None:
                idmap.chown_tree(self.workspace, *self._p.owner)

    def _own(self, *dirs: Path) -> None:
        """Give dirs to the sandbox host uid (the overlay's root takes its upper dir's owner)."""
        if self._p.owner is not None:
            for d in dirs:
                os.chown(d, *self._p.owner)

    def _mount(self, snap: Snapshot) -> list[Callable[[], None]]:
        """Mount `snap`'s stack under the (empty) upper; returns freeing work for old layers."""
        held = [v.acquire() for v in snap.volumes]
        try:
            # Layer names relative to the scratch dir: the overlay's options show inside.
            mounts.mount_overlay(
                snap.lowers(), self.upper, self.work, self.workspace, relative_to=self._p.root
            )
        except BaseException:
            layers.run_all([f for v in held if (f := v.release())])
            raise
        frees = [f for v in self._held if (f := v.release())]
        self._held, self._stack = held, snap
        return frees

    def _kill_processes(self) -> None:
        for pgid in list(self._pgids):
            kill_group(pgid)
        if self._p.cgroups is not None:
            self._p.cgroups.kill(self._groups)

    def _teardown(self) -> list[Callable[[], None]]:
        """Mark closed and do the bookkeeping; return the slow steps (kill, rmdir, unmount)."""
        if self._closed:
            return []
        self._closed = True
        cleanup.unregister(self._cleanup_handle)
        self._p._sandboxes.pop(self.sandbox_id, None)
        self._drop_supervisor()
        ops: list[Callable[[], None]] = [self._kill_processes]
        if self._p.cgroups is not None:
            ops.append(functools.partial(self._p.cgroups.remove, self._groups))
        own = self._volume.release()
        if own is not None:
            ops.append(own)  # unmounts the overlay with it
        else:  # snapshots still use layers on this volume: free only what is ours alone
            if self._p.overlay:
                ops.append(functools.partial(mounts.umount, self.workspace))
            ops += [
                functools.partial(hostfs.remove_tree, d) for d in (self.upper, self.work, self.tmp, self.home)
            ]
            if not self._p.overlay:
                ops.append(functools.partial(hostfs.remove_tree, self.workspace))
        ops += [f for v in self._held if (f := v.release())]
        self._held = []
        ops += self._p.release_unused_views()  # after the overlay over the view is unmounted
        return ops

    def _cleanup_sync(self) -> None:
        layers.run_all(self._teardown())

    async def close(self) -> None:
        if self._closed:
            return
        if self._sup_task is not None:
            # Let the supervisor exit (its namespace ends with it) and wait here, off the worker
            # threads, so the cgroup sweep below finds nothing left to wait for.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._stop_supervisor(), 5)
        for pgid in list(self._pgids):  # quick signals now; the cgroup sweep runs in the thread
            kill_group(pgid)
        done: asyncio.Future[None] | None = None
        try:
            # Let a snapshot/restore in progress finish its remount (bounded), so the teardown
            # below never races it.
            await self._gate.settle(timeout=10)
        finally:
            # The slow part (unmount, cgroup rmdir) runs in a worker thread so a burst of closes
            # never stalls the event loop; a cancelled close still finishes in that thread.
            ops = self._teardown()
            if ops:
                done = asyncio.get_running_loop().run_in_executor(None, layers.run_all, ops)
        if done is not None:
            await done

    @property
    def info(self) -> SandboxInfo:
        return SandboxInfo(self.sandbox_id, "bwrap", isolated=True, limits=self._limits)

    def _check_open(self) -> None:
        if self._closed:
            raise SandboxNotFound(f"sandbox {self.sandbox_id} is closed: create a new one")

    # -- exec -----------------------------------------------------------------------------------

    def _launcher(self, supervisor: bool = False) -> tuple[list[str], Callable[[], None] | None, Path]:
        """How bwrap is started: an argv prefix and/or a preexec function, and where bwrap finds
        this sandbox's volume (its host path, or the compiled launcher's private view of it).

        For a supervisor the CPU-time soft limit stays at the hard one: it lasts many execs, and
        it sets the exec's own limit in each command it starts (`_exec_rlimits`).

        As root, the compiled launcher (`_launcher.c`, where built) joins the sandbox's cgroups,
        sets rlimits, enters the launch namespace, drops to the sandbox host uid (see `idmap`),
        resets signals and execs bwrap, all in one exec; where it is not built, a tiny /bin/sh
        does the first two and execs bwrap through nsenter or setpriv (and env where signals
        need a reset), the same steps in three or four execs. Python then spawns with vfork,
        where a preexec function would force a full fork of this (possibly large) process on
        every exec (~15 ms under load). Unprivileged, rlimits are set pre-exec.
        """
        lim = self._limits
        p = self._p
        if p.launch_as_root and p.launcher is not None:
            prefix, volume = self._compiled_launcher(supervisor)
            return prefix, None, volume
        if p.launch_as_root:
            steps = [f"echo $$ > {shlex.quote(str(g / 'cgroup.procs'))}" for g in self._groups]
            if p.range_userns_fd is not None:  # our fd, reopened through /proc (dash: fds 0-9 only)
                steps.append(f"exec {USERNS_FD}</proc/$PPID/fd/{p.range_userns_fd}")
            steps += _ulimit_steps(self._root_limits(supervisor))
            script = (
                f"{{ {' && '.join(steps)}; }} || "
                f"{{ echo '{_LAUNCH_FAILED}joining its cgroups or setting its rlimits failed' >&2; exit 125; }}; "
                'exec "$@"'
            )
            # The reset goes after the shell: sh keeps signals ignored on entry ignored.
            reset = signals.clean_start_prefix()
            return (
                ["/bin/sh", "-c", script, "inhabit-launch", *p.launch_prefix(reset)],
                None,
                self._volume.path,
            )
        # Unprivileged there is no cgroup and no sized volume: RLIMIT_FSIZE's hard limit is the
        # only per-file bound, so it stays; CPU keeps the caller's hard limit (the wall-clock
        # timeout bounds every exec).
        cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)[1]
        core_hard = resource.getrlimit(resource.RLIMIT_CORE)[1] if p.core_to_file else 0
        limits = [
            (resource.RLIMIT_CPU, (cpu_hard if supervisor else lim.cpu_time_s, cpu_hard)),
            (resource.RLIMIT_FSIZE, (lim.disk_mb * 1024 * 1024,) * 2),
            (resource.RLIMIT_CORE, (0, core_hard)),
            (resource.RLIMIT_AS, (lim.memory_mb * 1024 * 1024,) * 2),  # RLIMIT_NPROC: see _nproc_wrap
        ]

        def apply() -> None:
            for what, value in limits:
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(what, value)

        return signals.clean_start_prefix(), apply, self._volume.path

    def _compiled_launcher(self, supervisor: bool) -> tuple[list[str], Path]:
        """The compiled launcher's argv up to bwrap: the same steps as the shell's in `_launcher`
        (cgroups, the user namespace fd, rlimits), then the launch namespace, the private view
        of this sandbox's volume and the uid drop (`BwrapSandboxProvider.launcher_args`), and
        the parent-death signal naming this process (-p: bwrap's own --die-with-parent starts
        only once bwrap runs); it resets every signal before the exec. With it, where bwrap finds
        the volume."""
        p = self._p
        assert p.launcher is not None
        argv = [p.launcher]
        for g in self._groups:
            argv += ["-g", str(g / "cgroup.procs")]
        if p.range_userns_fd is not None:
            argv += ["-f", str(p.range_userns_fd)]
        for what, soft, hard in self._root_limits(supervisor):
            argv += ["-r", f"{what}:{_rlim(soft)}:{_rlim(hard)}"]
        rest, volume = p.launcher_args(self._volume.path)
        return [*argv, *rest, "-p", str(os.getpid()), "--"], volume

    def _root_limits(self, supervisor: bool) -> list[tuple[int, int, int]]:
        """The rlimits both root launchers set on bwrap, as (resource, soft, hard); both format
        them from this one list (`_ulimit_steps` for the shell, `-r` for the compiled launcher).

        As on a normal login the hard limits stay high, so a process may raise its own soft limit
        (test suites do): the enforcement is the cgroup (memory, pids, cpu.max), the wall-clock
        timeout and the volume's size. CPU: SIGXCPU at the soft limit; a supervisor lasts many
        execs and sets each command's own (`_exec_rlimits`), so its soft limit stays unlimited.
        No file size limit: the volume bounds the bytes written (ENOSPC, as a full disk), and a
        sparse file past disk_mb works as on any machine (CPython's test_mmap makes 4 GB ones).
        Core dumps: soft 0, hard unlimited as on a login, where the kernel writes them as files
        in the process's cwd; where core_pattern pipes them to a host program, hard 0 (never
        feed a host handler). Address space only where no cgroup bounds memory.
        """
        lim, unlimited = self._limits, resource.RLIM_INFINITY
        out = [
            (resource.RLIMIT_CPU, unlimited if supervisor else lim.cpu_time_s, unlimited),
            (resource.RLIMIT_CORE, 0, unlimited if self._p.core_to_file else 0),
            (resource.RLIMIT_FSIZE, unlimited, unlimited),
        ]
        if self._p.cgroups is None:
            out.append((resource.RLIMIT_AS, lim.memory_mb * 1024 * 1024, lim.memory_mb * 1024 * 1024))
        return out

    def _bwrap_argv(self, prefix: Sequence[str], inner_cwd: str, volume: Path) -> list[str]:
        """bwrap's argv up to and including its `--`: the sandbox's namespaces and mounts, with
        this sandbox's /tmp, home and workspace bound from `volume` (see `_launcher`)."""
        machine = self._p.machine
        return [
            *prefix,
            *self._p.base_argv,
            "--bind",
            str(volume / self.tmp.relative_to(self._volume.path)),
            "/tmp",
            "--perms",
            "0755",
            "--dir",
            "/home",
            "--bind",
            str(volume / self.home.relative_to(self._volume.path)),
            machine.home,
            "--bind",
            str(volume / self.workspace.relative_to(self._volume.path)),
            WORKSPACE_MOUNT,
            *self._p.python_argv,
            *self._env_argv,
            *self._p.sys_argv,
            # Last: the root tmpfs bwrap builds all this on is read-only from here on.
            "--remount-ro",
            "/",
            "--chdir",
            inner_cwd,
            "--as-pid-1",  # PID 1 is _INIT or the supervisor, not bwrap (whose argv names host paths)
            "--",
        ]

    def _exec_rlimits(self) -> list[tuple[int, int, int | None]]:
        """The limits the supervisor sets in each command: (resource, soft, hard or None = keep)."""
        out: list[tuple[int, int, int | None]] = [(resource.RLIMIT_CPU, self._limits.cpu_time_s, None)]
        if self._p.cgroups is None:  # see _nproc_wrap: inside the user namespace, per sandbox here
            n = self._limits.max_processes
            out.append((resource.RLIMIT_NPROC, n, n))
        return out

    async def run_exec(self, call: ExecCall) -> ExecResult:
        self._check_open()
        cmd, stdin = call.argv, call.stdin
        rel = paths.normalize(call.cwd)
        if not paths.resolve(self.workspace, rel).is_dir():
            raise SandboxError(f"cwd {call.cwd!r} is not a directory in the workspace")
        inner_cwd = WORKSPACE_MOUNT if rel == "." else f"{WORKSPACE_MOUNT}/{rel}"
        timeout = call.timeout(self._limits)
        full_env = self._command_env(call.env)

        async def run() -> ExecResult:
            result = None
            if self._no_supervisor is None and self._execs > self._p.supervise_after:
                result = await self._exec_supervised(cmd, full_env, inner_cwd, timeout, stdin)
            if result is None:
                self._p.exec_counts["per_exec_bwrap"] += 1
                return await self._exec_own_bwrap(cmd, full_env, inner_cwd, timeout, stdin)
            self._p.exec_counts["supervised"] += 1
            return result

        return await self._run_limited(timeout, run)

    def _command_env(self, env: Mapping[str, str] | None) -> dict[str, str]:
        """A command's environment: the machine profile's, then the caller's `env`."""
        return {
            **self._p.machine.environment(self._path_env),
            # As in the process backend: no .pyc in the workspace (stale bytecode after a
            # same-size edit within the pyc's one-second mtime resolution).
            "PYTHONDONTWRITEBYTECODE": "1",
            **(env or {}),
        }

    async def _run_limited(self, timeout: float, run: Callable[[], Awaitable[ExecResult]]) -> ExecResult:
        """Count one exec and await `run()` inside the sandbox's gate, then say which limit ended
        it (timeout, the memory cgroup's OOM kills, the pids cgroup's refusals during the run)."""
        cg = self._p.cgroups
        oom = refused = 0
        async with self._gate.shared(self._check_open):
            # The counts as the last exec to finish read them (a new group's are 0): no process
            # of the sandbox runs between its execs, so this reads two files per exec, not four.
            oom_before, pids_before = self._limit_counts
            self._execs += 1
            result = await run()
            if cg is not None:
                now = (cg.oom_kills(self._groups), cg.pids_refusals(self._groups))
                oom, refused = now[0] - oom_before, now[1] - pids_before
                seen = self._limit_counts  # execs may overlap: keep the largest counts read
                self._limit_counts = (max(seen[0], now[0]), max(seen[1], now[1]))
        hit = limit_message(result.exit_code, result.timed_out, timeout, self._limits, oom, refused)
        if hit:
            result = dataclasses.replace(result, limit_hit=hit)
        return result

    def warm_tests_unavailable(self) -> str | None:
        if not self._p.warm_tests:
            return "warm test runs are off (sandbox.warm_tests)"
        if self._no_supervisor is not None:
            return "the sandbox has no supervisor"
        return None

    async def exec_pytest(
        self,
        command: warm.PytestCommand,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None,
        unset: Sequence[str],
        override: Mapping[str, str],
        timeout_s: float,
    ) -> ExecResult:
        self._check_open()
        why = self.warm_tests_unavailable()
        if why is not None:
            raise WarmUnavailable(why)
        timeout = exec_timeout(timeout_s, self._limits)
        # The cold run's environment: exec's, less `unset`, plus `override`, plus what `sh -c`
        # adds (dash exports PWD), plus the command's assignments.
        run_env = self._command_env(env)
        for name in unset:
            run_env.pop(name, None)
        run_env.update(override)
        run_env["PWD"] = WORKSPACE_MOUNT
        run_env.update(command.assign)
        pythonpath = warm.pythonpath_entries(run_env)
        if isinstance(pythonpath, str):
            raise WarmUnavailable(pythonpath)

        async def run() -> ExecResult:
            try:
                sup = await self._supervisor()
            except SupervisorGone as e:
                raise WarmUnavailable(f"no supervisor: {e}") from e
            result = await self._run_warm(sup, command, list(args), run_env, pythonpath, timeout)
            self._p.exec_counts["warm"] += 1
            return result

        return await self._run_limited(timeout, run)

    async def _run_warm(
        self,
        sup: Supervisor,
        command: warm.PytestCommand,
        args: list[str],
        run_env: dict[str, str],
        pythonpath: list[str],
        timeout: float,
    ) -> ExecResult:
        key = (command.program, command.script, warm.startup_key(run_env))
        for _ in range(2):  # a worker found dead on sending is restarted once, here
            worker = sup.workers.get(key)
            if worker is None or not worker.alive:
                starts = sup.worker_starts.get(key, 0)
                if starts >= warm.MAX_STARTS:
                    raise WarmUnavailable(
                        sup.worker_refused.get(key, "the worker was restarted once already")
                    )
                sup.worker_starts[key] = starts + 1
                self._p.exec_counts["warm_starts"] += 1
                try:
                    worker = sup.workers[key] = await self._start_worker(sup, key, command, run_env)
                except WarmUnavailable as e:  # it would not start here: not tried again
                    sup.worker_starts[key], sup.worker_refused[key] = warm.MAX_STARTS, str(e)
                    raise
            argv = [worker.script, *args] if worker.script else [command.program, *args]
            try:
                return await worker.run(
                    argv=argv,
                    env=run_env,
                    cwd=WORKSPACE_MOUNT,
                    rlimits=self._exec_rlimits(),
                    stdin=None,
                    timeout_s=timeout,
                    output_bytes=self._limits.output_bytes,
                    warm={"script": worker.script, "pythonpath": pythonpath},
                )
            except WarmFallback as e:
                raise WarmUnavailable(f"declined: {e}") from e
            except SupervisorGone:  # gone before the request went out: nothing ran
                self._check_open()
        raise WarmUnavailable("the worker died before the run started")

    async def _start_worker(
        self, sup: Supervisor, key: object, command: warm.PytestCommand, run_env: dict[str, str]
    ) -> warm.WarmWorker:
        try:
            script, interpreter = None, command.program
            if command.script:  # the interpreter is the script's (its #! line), found as sh would
                found = await sup.run(
                    argv=["sh", "-c", 'p=$(command -v -- "$1") || exit 3; echo "$p"; head -c 256 -- "$p"', "sh",
                          command.program],
                    env=run_env, cwd=WORKSPACE_MOUNT, rlimits=self._exec_rlimits(), stdin=None, timeout_s=30,
                    output_bytes=4096,
                )  # fmt: skip
                script, _, head = found.stdout.partition("\n")
                interpreter = warm.shebang_interpreter(head) if found.ok and script.startswith("/") else None
                if interpreter is None:
                    raise WarmUnavailable("the pytest script has no plain #! line")
            return await warm.WarmWorker.start(sup, key, interpreter, script, run_env, WORKSPACE_MOUNT)
        except (SupervisorGone, RequestTooLarge) as e:
            raise WarmUnavailable(f"the worker did not start: {e}") from e

    async def _exec_supervised(
        self, cmd: list[str], env: dict[str, str], inner_cwd: str, timeout: float, stdin: bytes | None
    ) -> ExecResult | None:
        """Run through the supervisor; None where this exec must take the per-exec path."""
        try:
            sup = await self._supervisor()
        except SupervisorGone as e:
            self._check_open()  # closed meanwhile: say so, not why the supervisor is gone
            if _LAUNCH_FAILED in e.stderr:
                raise SandboxError(
                    f"could not start a command in sandbox {self.sandbox_id}: {e.stderr[-500:]}"
                ) from e
            # It cannot start here: this sandbox runs each exec the old way from now on.
            log.warning("sandbox %s: no supervisor (%s); one bwrap per exec", self.sandbox_id, e)
            self._no_supervisor = f"{e}: {e.stderr[-300:]}"
            return None
        try:
            return await sup.run(
                argv=cmd,
                env=env,
                cwd=inner_cwd,
                rlimits=self._exec_rlimits(),
                stdin=stdin,
                timeout_s=timeout,
                output_bytes=self._limits.output_bytes,
            )
        except (RequestTooLarge, SupervisorGone):
            # Too large for the channel, or it died before the command was sent: this exec takes
            # its own bwrap (the next one starts a new supervisor).
            self._check_open()
            return None

    async def _supervisor(self) -> Supervisor:
        """The running supervisor (started by the first caller; the others wait for it)."""
        loop = asyncio.get_running_loop()
        for _ in range(2):
            task = self._sup_task
            if task is None or task.get_loop() is not loop:
                self._drop_supervisor()  # one of another event loop cannot serve this one
                task = self._sup_task = loop.create_task(self._start_supervisor())
            try:
                sup = await asyncio.shield(task)
            except BaseException:
                if task.done() and self._sup_task is task:
                    self._sup_task = None
                raise
            if sup.alive:
                return sup
            if self._sup_task is task:  # it died since (e.g. killed): start another
                self._sup_task = None
        raise SupervisorGone("the sandbox supervisor died right after starting")

    async def _start_supervisor(self) -> Supervisor:
        prefix, preexec, volume = self._launcher(supervisor=True)
        self._p.exec_counts["supervisor_starts"] += 1
        return await Supervisor.start(
            self._bwrap_argv(prefix, WORKSPACE_MOUNT, volume),
            env=self._p.machine.environment(self._p.path_env),
            preexec_fn=preexec,
            on_start=self._pgids.add,
            on_exit=self._pgids.discard,
        )

    def _drop_supervisor(self) -> None:
        """Kill the supervisor, if any, without waiting (close, or a change of event loop)."""
        task, self._sup_task = self._sup_task, None
        if task is None:
            return
        if not task.done():
            with contextlib.suppress(RuntimeError):  # its loop closed (cleanup at exit)
                task.cancel()  # Supervisor.start kills what it started
        elif not task.cancelled() and task.exception() is None:
            task.result().kill()

    async def _stop_supervisor(self) -> None:
        """End the supervisor and wait until its namespace is gone (before a remount)."""
        task, self._sup_task = self._sup_task, None
        if task is None:
            return
        if task.get_loop() is not asyncio.get_running_loop():
            self._sup_task = task
            self._drop_supervisor()
            if self._p.cgroups is not None:
                await asyncio.to_thread(self._p.cgroups.kill, self._groups)
            return
        if not task.done():
            task.cancel()
        try:
            sup = await task
        except BaseException:  # cancelled or failed: Supervisor.start cleaned up
            return
        if not await sup.stop() and self._p.cgroups is not None:
            await asyncio.to_thread(self._p.cgroups.kill, self._groups)

    async def _exec_own_bwrap(
        self, cmd: list[str], env: dict[str, str], inner_cwd: str, timeout: float, stdin: bytes | None
    ) -> ExecResult:
        """The per-exec path: one bwrap whose init shell runs `cmd` (the pid namespace ends with it)."""
        if self._p.cgroups is None:
            cmd = _nproc_wrap(cmd, self._limits.max_processes)
        prefix, preexec, volume = self._launcher()
        argv = [
            *self._bwrap_argv(prefix, inner_cwd, volume),
            *(_INIT if self._p.range_userns_fd is None else _INIT_CLOSING),
            *cmd,
        ]
        result = await run_capped(
            argv,
            env=env,
            cwd="/",
            timeout_s=timeout,
            output_bytes=self._limits.output_bytes,
            stdin=stdin,
            preexec_fn=preexec,
            on_start=self._pgids.add,
            after_exit=self._after_exit,
        )
        if result.exit_code == 125 and _LAUNCH_FAILED in result.stderr:
            raise SandboxError(
                f"could not start a command in sandbox {self.sandbox_id}: {result.stderr[-500:]}"
            )
        code = result.exit_code if result.timed_out else _exit_code(result.exit_code)
        if code != result.exit_code:
            result = dataclasses.replace(result, exit_code=code)
        return result

    def _after_exit(self, pgid: int) -> None:
        # The pid namespace ended with bwrap's child; this only catches bwrap's own group.
        kill_group(pgid)
        self._pgids.discard(pgid)

    # -- files ----------------------------------------------------------------------------------

    # Host-side file operations pass the gate as kind "file": never while an exec runs (no
    # sandboxed process can race our path checks) nor during a snapshot/restore remount.

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        async with self._gate.shared(self._check_open, kind="file"):
            return hostfs.read_file(self.workspace, path)

    async def write_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        async with self._gate.shared(self._check_open, kind="file"):
            hostfs.write_file(self.workspace, path, data, owner=self._p.owner)

    async def delete_file(self, path: str) -> None:
        self._check_open()
        async with self._gate.shared(self._check_open, kind="file"):
            await asyncio.to_thread(hostfs.delete, self.workspace, path)

    async def list_files(self, path: str = ".", *, recursive: bool = True) -> list[FileEntry]:
        self._check_open()
        async with self._gate.shared(self._check_open, kind="file"):
            return await asyncio.to_thread(hostfs.list_files, self.workspace, path, recursive)

    async def workspace_digest(
        self, *, max_entries: int, max_bytes: int, head_only: dict[bytes, int] | None = None
    ) -> str | None:
        self._check_open()
        async with self._gate.shared(self._check_open, kind="file"):
            return await asyncio.to_thread(
                hostfs.tree_digest,
                self.workspace,
                max_entries=max_entries,
                max_bytes=max_bytes,
                head_only=head_only,
            )

    # -- snapshots ------------------------------------------------------------------------------

    async def snapshot(self) -> str:
        self._check_open()
        async with self._gate.exclusive():  # a frozen layer must not change under a command
            self._check_open()
            if not self._p.overlay:
                return await asyncio.to_thread(self._p._store_copy, self.workspace)
            assert self._stack is not None
            if not any(self.upper.iterdir()):
                return self._p._register(self._stack.base, self._stack.layers, self._held)
            self._layer_n += 1
            layer = self._volume.path / "layers" / str(self._layer_n)
            await self._stop_supervisor()  # its mount namespace holds the overlay being frozen
            await asyncio.to_thread(self._freeze_upper, layer)
            snap_id = self._p._register(
                self._stack.base, (layer, *self._stack.layers), [self._volume, *self._held]
            )
            layers.run_all(self._mount(self._p._snapshots[snap_id]))
            return snap_id

    def _freeze_upper(self, layer: Path) -> None:
        """Unmount and turn the upper dir into the frozen `layer` (then a fresh upper/work)."""
        mounts.umount(self.workspace, detach=False)
        self.upper.rename(layer)
        self.upper.mkdir()
        self._own(self.upper)
        hostfs.remove_tree(self.work)
        self.work.mkdir()

    def _reset_upper(self) -> None:
        mounts.umount(self.workspace)
        for d in (self.upper, self.work):
            hostfs.remove_tree(d)
            d.mkdir()
        self._own(self.upper)

    async def restore(self, snapshot_id: str) -> None:
        self._check_open()
        snap = self._p._get(snapshot_id)
        async with self._gate.exclusive(before_wait=self._kill_processes):
            self._check_open()
            await self._stop_supervisor()  # it would keep seeing the replaced workspace
            if not self._p.overlay:
                await asyncio.to_thread(self._replace_copy, snap)
                return
            await asyncio.to_thread(self._reset_upper)
            frees = self._mount(snap)
        if frees:
            await asyncio.to_thread(layers.run_all, frees)

    def _replace_copy(self, snap: Snapshot) -> None:
        hostfs.remove_tree(self.workspace)
        hostfs.copy_tree(snap.copy_dir or snap.base, self.workspace)
        if self._p.owner is not None and snap.copy_dir is None:
            idmap.chown_tree(self.workspace, *self._p.owner)
