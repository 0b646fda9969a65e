"""Kernel mounts for the bwrap backend: overlayfs stacks, size-capped tmpfs, unmounting (root only).

Mounting goes straight to the syscalls through ctypes (no `mount` subprocess: ~8 ms per overlay
instead of ~15). Overlay stacks use the new mount API (fsopen/fsconfig "lowerdir+", Linux 6.8+)
so a deep stack of snapshot layers has no 4 KiB option-string limit; older kernels fall back to
mount(2) with a `lowerdir=a:b:c` string.

Overlay options show in the mount table of every sandbox that sees the overlay, so the layer
paths under the provider's scratch dir are given relative to it (`relative_to`): the syscalls
then run in one worker thread that has its own working directory (`unshare(CLONE_FS)`), and
the table inside shows `lowerdir+=idmap/2`, never the host's scratch path.

Protects nothing by itself; it is plumbing. Every mount lives under the provider's private
scratch directory and is undone on close, at exit, or by the stale-mount sweep of a later run.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
_libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
_libc.unshare.argtypes = [ctypes.c_int]
_libc.syscall.restype = ctypes.c_long

MNT_DETACH = 2
MS_NOSUID = 0x2
MS_NODEV = 0x4

# x86_64 / aarch64 share these numbers (the new mount API postdates the split).
_SYS_MOVE_MOUNT = 429
_SYS_FSOPEN = 430
_SYS_FSCONFIG = 431
_SYS_FSMOUNT = 432
_FSCONFIG_SET_STRING = 1
_FSCONFIG_CMD_CREATE = 6
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_FSOPEN_CLOEXEC = 1
_FSMOUNT_CLOEXEC = 1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4

_new_api: bool | None = None  # unknown until first tried


class MountError(OSError):
    pass


def _err(what: str) -> MountError:
    e = ctypes.get_errno()
    return MountError(e, f"{what}: {os.strerror(e)}")


def mount_tmpfs(
    target: Path, size_bytes: int, mode: int = 0o755, owner: tuple[int, int] | None = None
) -> None:
    opts = f"size={size_bytes},mode={mode:o}"
    if owner is not None:
        opts += f",uid={owner[0]},gid={owner[1]}"
    opts = opts.encode()
    if _libc.mount(b"tmpfs", os.fsencode(target), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
        raise _err(f"mount tmpfs on {target}")


MS_RDONLY = 0x1
MS_REMOUNT = 0x20
MS_BIND = 0x1000
MS_REC = 0x4000


def bind_ro(source: Path, target: Path) -> None:
    """Bind `source` (recursively) on the existing `target`, read-only."""
    if _libc.mount(os.fsencode(source), os.fsencode(target), None, MS_BIND | MS_REC, None) != 0:
        raise _err(f"bind {source} on {target}")
    flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV
    if _libc.mount(None, os.fsencode(target), None, flags, None) != 0:
        raise _err(f"remount {target} read-only")


MS_SHARED = 1 << 20
MS_PRIVATE = 1 << 18


def make_shared_mount_point(path: Path) -> None:
    """Bind `path` onto itself and make it shared, in a peer group of its own: mounts made under
    it later propagate to the slave copies of it in other namespaces (see
    `inhabit.sandbox.launchns`). Private first: a bind of a directory inside a shared mount would
    otherwise join that mount's group, and every mount under it would be made again, hidden,
    under the peer."""
    if _libc.mount(os.fsencode(path), os.fsencode(path), None, MS_BIND, None) != 0:
        raise _err(f"bind {path} on itself")
    for flag, what in ((MS_PRIVATE, "private"), (MS_SHARED, "shared")):
        if _libc.mount(None, os.fsencode(path), None, flag, None) != 0:
            e = _err(f"make {path} {what}")
            umount(path)
            raise e


def umount(target: Path, detach: bool = True) -> None:
    """Unmount `target` (lazily by default so a busy mount never blocks cleanup)."""
    if _libc.umount2(os.fsencode(target), MNT_DETACH if detach else 0) != 0:
        e = ctypes.get_errno()
        if e not in (errno.EINVAL, errno.ENOENT):  # not mounted / gone: already clean
            raise MountError(e, f"umount {target}: {os.strerror(e)}")


def _check_path(p: Path) -> bytes:
    b = os.fsencode(p)
    if any(c in b for c in (b",", b":", b"\\")):
        raise MountError(
            errno.EINVAL, f"path {p} contains ',', ':' or '\\', which overlay options cannot hold"
        )
    return b


_CLONE_FS = 0x200


class _DirThread:
    """One worker thread with a working directory of its own (unshare(CLONE_FS)): it may chdir
    without moving the cwd of the rest of the process."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[tuple[Path, Callable[[], object], Future[object]]] = queue.SimpleQueue()
        self._ready: Future[bool] = Future()
        threading.Thread(target=self._run, name="inhabit-mounts", daemon=True).start()
        self.ok = self._ready.result()

    def _run(self) -> None:
        self._ready.set_result(_libc.unshare(_CLONE_FS) == 0)
        while True:
            where, fn, fut = self._q.get()
            try:
                os.chdir(where)
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)

    def call(self, where: Path, fn: Callable[[], T]) -> T:
        fut: Future[object] = Future()
        self._q.put((where, fn, fut))
        return fut.result()  # type: ignore[return-value]


_dir_thread: _DirThread | None = None
_dir_lock = threading.Lock()


def _in_dir(where: Path, fn: Callable[[], T]) -> T | None:
    """Run `fn` with cwd `where` (in the worker thread); None where the thread cannot have a
    cwd of its own (then the caller uses absolute paths)."""
    global _dir_thread
    with _dir_lock:
        if _dir_thread is None:
            _dir_thread = _DirThread()
    if not _dir_thread.ok:
        return None
    return _dir_thread.call(where, fn)


def _rel(p: Path, base: Path) -> Path:
    try:
        return p.relative_to(base)
    except ValueError:
        return p


def mount_overlay(
    lowers: Sequence[Path],
    upper: Path | None,
    work: Path | None,
    target: Path,
    *,
    relative_to: Path | None = None,
) -> None:
    """Mount overlayfs on `target`: `lowers` top first, writes to `upper` (None: read-only, which
    wants two or more lowers). Layers under `relative_to` are named relative to it (see the
    module docstring)."""
    if relative_to is not None:
        target = target.absolute()
        rel_lowers = [_rel(p, relative_to) for p in lowers]
        rel_upper = _rel(upper, relative_to) if upper is not None else None
        rel_work = _rel(work, relative_to) if work is not None else None

        def mount() -> bool:
            _mount_overlay(rel_lowers, rel_upper, rel_work, target)
            return True

        if _in_dir(relative_to, mount):
            return
    _mount_overlay(lowers, upper, work, target)


def _mount_overlay(lowers: Sequence[Path], upper: Path | None, work: Path | None, target: Path) -> None:
    global _new_api
    if _new_api is not False:
        try:
            _mount_overlay_new(lowers, upper, work, target)
            _new_api = True
            return
        except MountError as e:
            if _new_api or e.errno not in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            _new_api = False
    opts = b"lowerdir=" + b":".join(_check_path(p) for p in lowers)
    if upper is not None and work is not None:
        opts += b",upperdir=" + _check_path(upper) + b",workdir=" + _check_path(work)
    opts += b",xino=off,redirect_dir=off"
    if len(opts) >= 4000:
        raise MountError(errno.E2BIG, f"overlay stack of {len(lowers)} layers too deep for mount(2)")
    if _libc.mount(b"overlay", os.fsencode(target), b"overlay", MS_NOSUID | MS_NODEV, opts) != 0:
        raise _err(f"mount overlay on {target}")


def _mount_overlay_new(lowers: Sequence[Path], upper: Path | None, work: Path | None, target: Path) -> None:
    sc = _libc.syscall
    fs = sc(_SYS_FSOPEN, b"overlay", _FSOPEN_CLOEXEC)
    if fs < 0:
        raise _err("fsopen overlay")
    try:
        settings = [(b"lowerdir+", os.fsencode(p)) for p in lowers]
        if upper is not None and work is not None:
            settings += [(b"upperdir", os.fsencode(upper)), (b"workdir", os.fsencode(work))]
        settings += [
            (b"xino", b"off"),
            (b"redirect_dir", b"off"),
        ]
        for key, value in settings:
            if sc(_SYS_FSCONFIG, fs, _FSCONFIG_SET_STRING, key, value, 0) < 0:
                raise _err(f"fsconfig {key.decode()}={value.decode(errors='replace')}")
        if sc(_SYS_FSCONFIG, fs, _FSCONFIG_CMD_CREATE, None, None, 0) < 0:
            raise _err("fsconfig create overlay")
        mnt = sc(_SYS_FSMOUNT, fs, _FSMOUNT_CLOEXEC, _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV)
        if mnt < 0:
            raise _err("fsmount overlay")
        try:
            if sc(_SYS_MOVE_MOUNT, mnt, b"", -100, os.fsencode(target), _MOVE_MOUNT_F_EMPTY_PATH) < 0:
                raise _err(f"move_mount overlay to {target}")
        finally:
            os.close(mnt)
    finally:
        os.close(fs)


def mounts_under(prefix: Path) -> list[Path]:
    """Mount points at or below `prefix`, deepest first (from /proc/self/mountinfo)."""
    pre = str(prefix).rstrip("/")
    found = []
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                mp = line.split()[4].encode().decode("unicode_escape")
                if mp == pre or mp.startswith(pre + "/"):
                    found.append(Path(mp))
    except OSError:
        return []
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def umount_all_under(prefix: Path) -> None:
    for mp in mounts_under(prefix):
        try:
            umount(mp)
        except MountError:
            pass
