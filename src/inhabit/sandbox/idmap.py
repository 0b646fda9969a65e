"""Run sandboxes as a dedicated non-root host uid even when inhabit runs as root (bwrap backend).

Why: if bwrap is started by root, the sandbox's uid 1000 is host uid 0 inside a user namespace.
It has no capabilities, but the kernel still treats "kuid 0" specially in places: global sysctls
under /proc/sys pass their permission check (a test wrote /proc/sys/vm/swappiness that way, and
/proc/sys/kernel/core_pattern would be a host-root escape), RLIMIT_NPROC never binds it, and
root's keys are its keys. So as root we start bwrap as `SANDBOX_HOST_UID` instead (via setpriv).

That uid must be able to edit the workspace, whose source files belong to someone else (root).
Copying and chowning every source tree would cost the millisecond create; instead the source
directory gets an *idmapped mount* (Linux 5.12+; overlay accepts idmapped layers since 5.19):
a read-only view of it in which files owned by host uid/gid 0 appear owned by the sandbox uid,
used as the overlay's bottom layer. Files owned by other uids appear as the overflow id (nobody):
readable by mode, not writable. Where a filesystem refuses idmapping, the caller falls back to a
chowned copy.

Protects against: the kuid-0 channels above. Does not by itself isolate anything else: it only
changes which host uid the (already namespaced, capability-less) sandbox processes run as.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import time
from pathlib import Path

SANDBOX_HOST_UID = int(os.environ.get("INHABIT_SANDBOX_HOST_UID", "1100000"))
SANDBOX_HOST_GID = SANDBOX_HOST_UID

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.syscall.restype = ctypes.c_long

_SYS_OPEN_TREE = 428
_SYS_MOVE_MOUNT = 429
_SYS_MOUNT_SETATTR = 442
_OPEN_TREE_CLONE = 1
_OPEN_TREE_CLOEXEC = 0o2000000
_AT_RECURSIVE = 0x8000
_AT_EMPTY_PATH = 0x1000
_AT_FDCWD = -100
_MOVE_MOUNT_F_EMPTY_PATH = 0x4
_MOUNT_ATTR_RDONLY = 0x1
_MOUNT_ATTR_NOSUID = 0x2
_MOUNT_ATTR_NODEV = 0x4
_MOUNT_ATTR_IDMAP = 0x00100000


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def _err(what: str) -> OSError:
    e = ctypes.get_errno()
    return OSError(e, f"{what}: {os.strerror(e)}")


def setpriv_prefix(uid: int, gid: int) -> list[str] | None:
    """argv prefix that drops from root to uid/gid before exec (util-linux setpriv), or None."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    return [setpriv, f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--"]


def make_userns_fd(host_uid: int, host_gid: int) -> int:
    """An fd of a user namespace mapping its uid/gid 0 to host_uid/host_gid (for idmapping).

    A throwaway `unshare --user sleep` child provides the namespace (no fork of this process);
    root writes its maps, keeps the fd, and ends the child.
    """
    unshare = shutil.which("unshare")
    if unshare is None:
        raise OSError("util-linux `unshare` not found")
    child = subprocess.Popen([unshare, "--user", "sleep", "60"], stdin=subprocess.DEVNULL)
    try:
        mine = os.readlink("/proc/self/ns/user")
        deadline = time.monotonic() + 5
        while True:
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{child.pid}/ns/user") != mine:
                    break
            if time.monotonic() > deadline or child.poll() is not None:
                raise OSError("could not create a user namespace for idmapping")
            time.sleep(0.001)
        Path(f"/proc/{child.pid}/uid_map").write_text(f"0 {host_uid} 1\n")
        Path(f"/proc/{child.pid}/gid_map").write_text(f"0 {host_gid} 1\n")
        return os.open(f"/proc/{child.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        child.kill()
        child.wait()


_shared: dict[tuple[int, int], int] = {}


def shared_userns_fd(host_uid: int, host_gid: int) -> int:
    """`make_userns_fd`, made once per process and kept open (providers share it)."""
    key = (host_uid, host_gid)
    if key not in _shared:
        _shared[key] = make_userns_fd(host_uid, host_gid)
    return _shared[key]


def idmapped_view(source: Path, target: Path, userns_fd: int) -> None:
    """Mount a read-only, idmapped clone of `source` (recursively) on the existing dir `target`."""
    fd = _libc.syscall(
        _SYS_OPEN_TREE, _AT_FDCWD, os.fsencode(source), _OPEN_TREE_CLONE | _OPEN_TREE_CLOEXEC | _AT_RECURSIVE
    )
    if fd < 0:
        raise _err(f"open_tree {source}")
    try:
        attr = _MountAttr(
            _MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY | _MOUNT_ATTR_NOSUID | _MOUNT_ATTR_NODEV, 0, 0, userns_fd
        )
        flags = _AT_EMPTY_PATH | _AT_RECURSIVE
        if _libc.syscall(_SYS_MOUNT_SETATTR, fd, b"", flags, ctypes.byref(attr), ctypes.sizeof(attr)) < 0:
            raise _err(f"idmapping {source}")
        if (
            _libc.syscall(_SYS_MOVE_MOUNT, fd, b"", _AT_FDCWD, os.fsencode(target), _MOVE_MOUNT_F_EMPTY_PATH)
            < 0
        ):
            raise _err(f"move_mount to {target}")
    finally:
        os.close(fd)


def chown_tree(path: Path, uid: int, gid: int) -> None:
    """chown -R without following symlinks (the copy fallback)."""
    os.chown(path, uid, gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)
