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

A range of uids (`range_userns_fd`): bwrap maps one uid into the sandbox's user namespace, so
`chown` to another user, `setreuid` and friends answer EINVAL ("no such uid here") where every
real machine answers EPERM. As root we make the sandboxes' user namespace ourselves instead,
mapping inside uids/gids 0-65535: the profile's uid to `SANDBOX_HOST_UID`, every other to an
unused host id above it (`SANDBOX_HOST_UID + 1` up to `+ 65535`, which nothing else may use),
never host root. Its owner is `SANDBOX_HOST_UID` (it is created through setpriv), so bwrap,
started as that uid, joins it (`--userns`) with the capabilities it needs to build the
sandbox, and the command runs as the profile's uid with none: it can reach no other uid.
Nested user namespaces are off in it (`user.max_user_namespaces` = 0, which bwrap asserts), as
`--disable-userns` does for bwrap's own.

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
from collections.abc import Sequence
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
    child = _new_userns([])
    try:
        Path(f"/proc/{child.pid}/uid_map").write_text(f"0 {host_uid} 1\n")
        Path(f"/proc/{child.pid}/gid_map").write_text(f"0 {host_gid} 1\n")
        return os.open(f"/proc/{child.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        child.kill()
        child.wait()


def _new_userns(prefix: Sequence[str]) -> subprocess.Popen[bytes]:
    """A `sleep` child in a new user namespace (started through `prefix`), once it has unshared."""
    unshare = shutil.which("unshare")
    if unshare is None:
        raise OSError("util-linux `unshare` not found")
    child = subprocess.Popen([*prefix, unshare, "--user", "sleep", "60"], stdin=subprocess.DEVNULL)
    mine = os.readlink("/proc/self/ns/user")
    deadline = time.monotonic() + 5
    while True:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{child.pid}/ns/user") != mine:
                return child
        if time.monotonic() > deadline or child.poll() is not None:
            child.kill()
            child.wait()
            raise OSError("could not create a user namespace")
        time.sleep(0.001)


def _write_map(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())  # the kernel takes a map in one write only
    finally:
        os.close(fd)


def id_ranges(inside: int, host: int, count: int = 65536) -> str:
    """uid_map text: `inside` -> `host`, every other id below `count` -> an id above `host`."""
    lines = [f"0 {host + 1} {inside}"] if inside else []
    lines.append(f"{inside} {host} 1")
    if inside + 1 < count:
        lines.append(f"{inside + 1} {host + inside + 1} {count - inside - 1}")
    return "\n".join(lines) + "\n"


def range_userns_fd(host_uid: int, host_gid: int, uid: int, gid: int) -> int:
    """An fd of a user namespace owned by `host_uid`, with inside ids 0-65535 mapped (see the
    module docstring) and no nested user namespaces allowed. Needs root, setpriv and nsenter."""
    drop = setpriv_prefix(host_uid, host_gid)
    nsenter = shutil.which("nsenter")
    if drop is None or nsenter is None:
        raise OSError("util-linux setpriv and nsenter are needed for a uid range")
    child = _new_userns(drop)
    try:
        _write_map(f"/proc/{child.pid}/uid_map", id_ranges(uid, host_uid))
        _write_map(f"/proc/{child.pid}/gid_map", id_ranges(gid, host_gid))
        # As the namespace's root (so the capability survives exec): no nested namespaces.
        off = subprocess.run(
            [nsenter, "-U", "-t", str(child.pid), "-S", "0", "-G", "0", "--",
             "/bin/sh", "-c", "echo 0 > /proc/sys/user/max_user_namespaces"],
            capture_output=True, text=True, timeout=20, check=False,
        )  # fmt: skip
        if off.returncode != 0:
            raise OSError(f"could not disable nested user namespaces: {off.stderr.strip()[:200]}")
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
