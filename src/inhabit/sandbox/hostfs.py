"""Host-side file operations on a workspace directory, shared by the process and bwrap backends.

Both backends keep the workspace as a real directory on the host (the process backend's copy,
the bwrap backend's overlay mount point), so reading, writing, deleting and listing are plain
file operations under that root after `paths.resolve` has checked the path. Also here: choosing
the scratch directory (a tmpfs, so discarding a sandbox is cheap), copying/removing trees, and a
digest of a whole tree by its raw names (`tree_digest`, the grade cache's key). `remove_tree`
lives in `inhabit.filetree` (the environment store, a lower part, uses it too).

Protects against: user paths escaping the root (via `paths`). Does not protect against: races
with processes running inside the same sandbox at the same moment (see `paths`).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from inhabit.errors import PathOutsideWorkspace, SandboxError, SandboxLimitExceeded
from inhabit.filetree import remove_tree
from inhabit.sandbox import paths
from inhabit.sandbox.base import FileEntry


def default_scratch_dir() -> Path:
    """A tmpfs when the host has one we can write (/dev/shm), else the system temp dir.

    tmpfs matters: on ext4 with online discard (as on the dev machines) deleting a large tree
    takes seconds, on tmpfs it takes milliseconds.
    """
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK | os.X_OK):
        return shm
    return Path(tempfile.gettempdir())


def make_private_dir(parent: Path, prefix: str) -> Path:
    """Create a fresh 0700 directory under `parent` (created if missing)."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=parent))


def copy_tree(src: Path, dst: Path) -> None:
    """Copy `src`'s contents into the new directory `dst`, keeping symlinks as symlinks.

    Uses `cp -a` (C, preserves modes and times) when present; a Python fallback otherwise.
    """
    if not src.is_dir():
        raise SandboxError(f"{src} is not a directory: give a workspace directory or a snapshot id")
    cp = shutil.which("cp")
    if cp:
        dst.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(
            [cp, "-a", "--", f"{src}/.", str(dst)], capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise SandboxError(f"copying {src} failed: {proc.stderr.strip()[:500]}")
        return
    shutil.copytree(src, dst, symlinks=True, dirs_exist_ok=True)


def world_traversable(path: Path) -> bool:
    """Whether any user may reach (and read/execute) `path`: o+x on every ancestor, o+rx on it."""
    path = path.resolve()
    try:
        if path.stat().st_mode & 0o005 != 0o005:
            return False
        return all(p.stat().st_mode & 0o001 for p in path.parents)
    except OSError:
        return False


def read_file(root: Path, user_path: str, max_bytes: int | None = None) -> bytes:
    host = paths.resolve(root, user_path)
    if host.is_dir():
        raise IsADirectoryError(f"{paths.normalize(user_path)} is a directory: use list_files")
    if not host.exists():
        raise FileNotFoundError(f"{paths.normalize(user_path)}: no such file in the workspace")
    # O_NONBLOCK + a regular-file check: a FIFO planted by sandboxed code must not hang the host.
    fd = os.open(host, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise SandboxError(f"{paths.normalize(user_path)} is not a regular file")
        if max_bytes is not None and st.st_size > max_bytes:
            raise SandboxLimitExceeded(
                f"{paths.normalize(user_path)} is larger than {max_bytes} bytes: read it in parts with exec"
            )
        return f.read()


def write_file(
    root: Path,
    user_path: str,
    data: bytes | str,
    max_bytes: int | None = None,
    owner: tuple[int, int] | None = None,
) -> Path:
    if isinstance(data, str):
        data = data.encode()
    if max_bytes is not None and len(data) > max_bytes:
        raise SandboxLimitExceeded(f"refusing to write {len(data)} bytes: the limit is {max_bytes}")
    if paths.normalize(user_path) == ".":
        raise IsADirectoryError("cannot write to the workspace root: give a file path")
    host = paths.resolve(root, user_path)
    missing = [p for p in (host.parent, *host.parent.parents) if not p.exists() and root in p.parents]
    host.parent.mkdir(parents=True, exist_ok=True)
    if owner is not None:  # the sandbox's user must be able to edit what the host wrote
        for p in missing:
            os.chown(p, *owner)
    if host.is_dir():
        raise IsADirectoryError(f"{paths.normalize(user_path)} is a directory")
    # A fresh, exclusively created temp name: a symlink planted under a predictable name would
    # otherwise redirect this (root) write.
    fd, tmp_name = tempfile.mkstemp(prefix=f".{host.name[:40]}.", suffix=".inhabit-tmp", dir=host.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if host.exists():
            shutil.copymode(host, tmp)
        else:
            os.chmod(tmp, 0o644)
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, host)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return host


def delete(root: Path, user_path: str) -> None:
    if paths.normalize(user_path) == ".":
        raise PathOutsideWorkspace("refusing to delete the workspace root itself: name a file or folder")
    host = paths.resolve(root, user_path, follow_last=False)
    if host.is_symlink() or host.is_file():
        host.unlink(missing_ok=True)
    elif host.is_dir():
        shutil.rmtree(host)
    elif host.exists() or os.path.lexists(host):
        host.unlink(missing_ok=True)


def tree_digest(
    root: Path, *, max_entries: int, max_bytes: int, head_only: dict[bytes, int] | None = None
) -> str | None:
    """SHA-256 over everything under `root` as it is on disk: each entry's raw name (bytes, as the
    kernel has it: no normalization, whitespace kept), its type and permission bits, and each
    regular file's bytes; a file inside a directory named in `head_only` (e.g. `__pycache__`)
    counts by its first N bytes. None, rather than a digest that could miss something, where the
    tree has a symlink, a fifo, socket or device, a file with more than one link, an entry it
    cannot read, more than `max_entries` entries or `max_bytes` of files."""
    h = hashlib.sha256()
    heads = head_only or {}
    entries = total = 0
    stack: list[bytes] = [b""]
    base = os.fsencode(root)
    try:
        while stack:
            rel = stack.pop()
            with os.scandir(os.path.join(base, rel) if rel else base) as it:
                names = sorted(e.name for e in it)
            for name in names:
                path = os.path.join(rel, name) if rel else name
                st = os.lstat(os.path.join(base, path))
                entries += 1
                if entries > max_entries:
                    return None
                mode = stat.S_IMODE(st.st_mode)
                if stat.S_ISDIR(st.st_mode):
                    h.update(b"d\0" + path + b"\0" + mode.to_bytes(2, "little"))
                    stack.append(path)
                    continue
                if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                    return None
                total += st.st_size
                if total > max_bytes:
                    return None
                fd = os.open(
                    os.path.join(base, path), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                )
                with os.fdopen(fd, "rb") as f:
                    limit = heads.get(os.path.basename(rel))
                    data = f.read() if limit is None else f.read(limit)
                h.update(b"f\0" + path + b"\0" + mode.to_bytes(2, "little") + len(data).to_bytes(8, "little"))
                h.update(data)
    except OSError:
        return None
    return h.hexdigest()


def list_files(root: Path, user_path: str = ".", recursive: bool = True) -> list[FileEntry]:
    top = paths.resolve(root, user_path)
    if not top.exists():
        raise FileNotFoundError(f"{paths.normalize(user_path)}: no such directory in the workspace")
    if not top.is_dir():
        st = top.lstat()
        return [FileEntry(paths.relative(root, top), "file", st.st_size)]
    entries: list[FileEntry] = []
    stack = [top]
    while stack:
        d = stack.pop()
        try:
            it = list(os.scandir(d))
        except OSError:
            continue
        for e in it:
            rel = paths.relative(root, e.path)
            try:
                st = e.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISLNK(st.st_mode):
                entries.append(FileEntry(rel, "symlink", 0))
            elif stat.S_ISDIR(st.st_mode):
                entries.append(FileEntry(rel, "dir", 0))
                if recursive:
                    stack.append(Path(e.path))
            elif stat.S_ISREG(st.st_mode):
                entries.append(FileEntry(rel, "file", st.st_size))
            # other kinds (devices, fifos, overlay whiteouts) are not workspace files
    entries.sort(key=lambda x: x.path)
    return entries


def sweep_stale(scratch: Path, prefix: str, unmount: Callable[[Path], None] | None = None) -> None:
    """Delete `<prefix><pid>-*` trees whose owning process is dead (it could not clean up).

    Directories of live processes (other programs using inhabit at the same time) are left alone.
    """
    try:
        candidates = list(scratch.glob(f"{prefix}*-*"))
    except OSError:
        return
    for d in candidates:
        pid = d.name[len(prefix) :].split("-")[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or not ours to judge)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        if unmount is not None:
            unmount(d)
        remove_tree(d)
