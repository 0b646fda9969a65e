"""Per-sandbox cgroups for the bwrap backend: memory, process count and CPU share, and kill-all.

Two hierarchies are supported:
- cgroup v2 (most current distributions): one group per sandbox with memory.max, pids.max,
  cpu.max, and `cgroup.kill` to end every process in it at once. Needs the memory and pids
  controllers delegated to a subtree we may write (root, or a systemd-delegated slice).
- cgroup v1 (the dev machines: v2 there has only hugetlb): one group per sandbox in each of the
  memory, pids and cpu hierarchies; kill-all reads `cgroup.procs` and SIGKILLs until empty
  (the pids limit bounds how many there can be, so this ends).

The v2 path could not be exercised on the dev machines (their v2 hierarchy has no controllers);
the v1 path is what the tests there run. Groups nest under the cgroup this process belongs to (so a supervisor's accounting
still holds) in `inhabit-<pid>/`, and are removed on close; a later run sweeps groups whose
owning pid is dead. If neither works, `detect()` returns None and the backend falls back to
rlimits (documented in `inhabit.sandbox.bwrap`).

Protects against: one sandbox exhausting host memory or processes, or starving the CPU. Does
not protect against: disk I/O bandwidth, kernel memory outside the memory controller's reach.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

from inhabit.sandbox.base import SandboxLimits

ROOT = Path("/sys/fs/cgroup")
_V1_CONTROLLERS = ("memory", "pids", "cpu")
CPU_PERIOD_US = 100_000
KERNEL_CPU_PERIOD_US = 100_000  # cpu.cfs_period_us of a new v1 group
CPU_QUOTA_CORES = 1.0  # each sandbox may use at most one core's worth of CPU time per period


def _own_path(controller: str | None) -> str:
    """This process's cgroup path in the v1 `controller` hierarchy (None: the v2 one)."""
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                _, ctrls, path = line.rstrip("\n").split(":", 2)
                names = ctrls.split(",") if ctrls else []
                if (controller is None and not ctrls) or (controller in names):
                    return path
    except OSError:
        pass
    return "/"


def _write(path: Path, value: str) -> None:
    # os-level calls: three system calls, where open() adds a stat, a tty probe and a seek to
    # each of the few cgroup files every sandbox's create, exec and close touch.
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    """A cgroup file's text (they are small: one read holds it)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
        return b"".join(chunks).decode()
    finally:
        os.close(fd)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class CgroupManager:
    """Makes, fills, kills and removes the cgroups of one provider's sandboxes."""

    def __init__(self, version: int, bases: dict[str, Path]):
        self.version = version
        self.bases = bases  # controller name (or "unified") -> inhabit-<pid> directory
        # False once the kernel has shown it has no swap accounting (the memsw/swap file is
        # missing): not tried again for every sandbox.
        self._swap_file = True

    @property
    def description(self) -> str:
        if self.version == 2:
            return "cgroup v2 (memory.max, pids.max, cpu.max, cgroup.kill)"
        return "cgroup v1 (memory, pids, cpu controllers)"

    def create(self, name: str, limits: SandboxLimits) -> list[Path]:
        """Create the groups of sandbox `name` with `limits`; returns the group directories."""
        mem = str(limits.memory_mb * 1024 * 1024)
        quota = str(int(CPU_PERIOD_US * CPU_QUOTA_CORES))
        groups: list[Path] = []
        try:
            if self.version == 2:
                g = self.bases["unified"] / name
                g.mkdir()
                groups.append(g)
                _write(g / "memory.max", mem)
                self._limit_swap(g / "memory.swap.max", "0")
                _write(g / "pids.max", str(limits.max_processes))
                with contextlib.suppress(OSError):
                    _write(g / "cpu.max", f"{quota} {CPU_PERIOD_US}")
            else:
                for ctrl, base in self.bases.items():
                    g = base / name
                    g.mkdir()
                    groups.append(g)
                    if ctrl == "memory":
                        _write(g / "memory.limit_in_bytes", mem)
                        self._limit_swap(g / "memory.memsw.limit_in_bytes", mem)
                    elif ctrl == "pids":
                        _write(g / "pids.max", str(limits.max_processes))
                    elif ctrl == "cpu":
                        if CPU_PERIOD_US != KERNEL_CPU_PERIOD_US:  # a new group has the default
                            _write(g / "cpu.cfs_period_us", str(CPU_PERIOD_US))
                        _write(g / "cpu.cfs_quota_us", quota)
        except OSError:
            self.remove(groups)
            raise
        return groups

    def _limit_swap(self, path: Path, value: str) -> None:
        """Write a swap limit where the kernel accounts swap (the file exists); else nothing."""
        if not self._swap_file:
            return
        try:
            _write(path, value)
        except FileNotFoundError:
            self._swap_file = False
        except OSError:
            pass

    def kill(self, groups: list[Path]) -> None:
        """SIGKILL every process in the groups and wait (bounded) until they are gone."""
        if not groups:
            return
        if self.version == 2:
            with contextlib.suppress(OSError):
                _write(groups[0] / "cgroup.kill", "1")
        procs_file = groups[0] / "cgroup.procs"
        if self.version == 1:
            procs_file = next((g for g in groups if "pids" in g.parts), groups[0]) / "cgroup.procs"
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                pids = [int(x) for x in _read(procs_file).split()]
            except OSError:
                return
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.002)

    def oom_kills(self, groups: list[Path]) -> int:
        """How many processes the memory limit of these groups has killed so far (0 if unknown)."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        for g in groups:
            if self.version == 1 and "memory" not in g.parts:
                continue
            try:
                for line in _read(g / name).splitlines():
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
            except (OSError, ValueError):
                pass
        return 0

    def pids_refusals(self, groups: list[Path]) -> int:
        """How many forks the process limit of these groups has refused so far (0 if unknown)."""
        for g in groups:
            if self.version == 1 and "pids" not in g.parts:
                continue
            try:
                for line in _read(g / "pids.events").splitlines():
                    key, _, value = line.partition(" ")
                    if key == "max":
                        return int(value)
            except (OSError, ValueError):
                pass
        return 0

    def is_empty(self, groups: list[Path]) -> bool:
        for g in groups:
            try:
                if _read(g / "cgroup.procs").strip():
                    return False
            except OSError:
                pass
        return True

    def remove(self, groups: list[Path]) -> None:
        for g in groups:
            for _ in range(50):  # rmdir fails (EBUSY) while dying processes are still listed
                try:
                    g.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.002)

    def close(self) -> None:
        for base in self.bases.values():
            with contextlib.suppress(OSError):
                base.rmdir()


def _sweep_stale(parent: Path) -> None:
    """Remove `inhabit-<pid>` groups left by dead processes (their sandboxes died with them)."""
    with contextlib.suppress(OSError):
        for d in parent.iterdir():
            if d.name.startswith("inhabit-") and d.name[8:].isdigit() and not _pid_alive(int(d.name[8:])):
                for child in d.iterdir() if d.is_dir() else ():
                    if child.is_dir():
                        with contextlib.suppress(OSError):
                            child.rmdir()
                with contextlib.suppress(OSError):
                    d.rmdir()


def _try_v2(parent: Path, name: str) -> CgroupManager | None:
    base = parent / name
    try:
        ctrls = (parent / "cgroup.controllers").read_text().split()
        if not {"memory", "pids"} <= set(ctrls):
            return None
        _sweep_stale(parent)
        wanted = " ".join(f"+{c}" for c in ("memory", "pids", "cpu") if c in ctrls)
        with contextlib.suppress(OSError):  # enabled already, or refused: base's write tells
            _write(parent / "cgroup.subtree_control", wanted)
        base.mkdir(exist_ok=True)
        _write(base / "cgroup.subtree_control", wanted)
        return CgroupManager(2, {"unified": base})
    except OSError:
        with contextlib.suppress(OSError):
            base.rmdir()
        return None


def detect() -> CgroupManager | None:
    """A manager for the best cgroup setup this process can use, or None (then: rlimits)."""
    if os.geteuid() != 0 and not os.environ.get("INHABIT_CGROUP_TRY"):
        return None
    name = f"inhabit-{os.getpid()}"
    # v2 first: the modern interface, where it has the controllers we need. Under our own
    # group when it delegates them; else (as root) under the hierarchy's root, which the
    # no-internal-processes rule does not bind.
    unified = ROOT if (ROOT / "cgroup.controllers").exists() else ROOT / "unified"
    for parent in dict.fromkeys([unified / _own_path(None).lstrip("/"), unified]):
        manager = _try_v2(parent, name)
        if manager is not None:
            return manager
    bases: dict[str, Path] = {}
    try:
        for ctrl in _V1_CONTROLLERS:
            hier = ROOT / ctrl
            if not (hier / "cgroup.procs").exists() or (hier / "cgroup.controllers").exists():
                if ctrl == "cpu":
                    continue  # CPU share is a nicety; memory and pids are required
                raise OSError(f"no cgroup v1 {ctrl} hierarchy")
            parent = hier / _own_path(ctrl).lstrip("/")
            _sweep_stale(parent)
            base = parent / name
            base.mkdir(exist_ok=True)
            bases[ctrl] = base
        return CgroupManager(1, bases)
    except OSError:
        for base in bases.values():
            with contextlib.suppress(OSError):
                base.rmdir()
        return None
