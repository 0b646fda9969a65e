"""Workspace path handling shared by every backend: user path -> safe host path, or a refusal.

A path the agent gives (`calc.py`, `./src/../calc.py`, `/home/dev/project/calc.py`) is normalised to a
workspace-relative POSIX path and then resolved on the host, component by component, following
symlinks the way the sandbox would see them: a relative link resolves inside its directory, an
absolute link resolves against the sandbox root, so `/home/dev/project/x` (`WORKSPACE_MOUNT`) means the workspace and any
other absolute target (`/etc/passwd`, `/root`) lies outside it. Whatever escapes the workspace
raises `PathOutsideWorkspace`; nothing here ever touches a path outside `root`.

What this does NOT protect against by itself: a process inside a live sandbox swapping a
directory for a symlink between our check and our use (a time-of-check race). The backends
therefore run host-side file operations only while no exec of that sandbox is in flight (see
`inhabit.sandbox.gate`; a bwrap sandbox has no process outside its execs).
"""

from __future__ import annotations

import os
import posixpath
from pathlib import Path

from inhabit.errors import PathOutsideWorkspace
from inhabit.sandbox.base import WORKSPACE_MOUNT

_MAX_LINKS = 40  # the same bound the kernel applies (ELOOP)


def normalize(user_path: str) -> str:
    """Return `user_path` as a normalised workspace-relative path ('.' for the root).

    Purely lexical: `..` may not climb above the workspace, absolute paths must lie under
    `WORKSPACE_MOUNT` (`/home/dev/project`). Exact: a name's edge whitespace is part of the name
    (`"notes.txt "` is not `notes.txt`), so every caller reads and writes the entry it names;
    the harness's tools strip what a model writes around a path before it gets here.
    """
    if not isinstance(user_path, str) or "\x00" in user_path:
        raise PathOutsideWorkspace(f"invalid path {user_path!r}: give a workspace-relative path")
    path = user_path or "."
    if path.startswith("/"):
        norm = posixpath.normpath(path)
        if norm == WORKSPACE_MOUNT:
            return "."
        if not norm.startswith(WORKSPACE_MOUNT + "/"):
            raise PathOutsideWorkspace(
                f"path {user_path!r} is outside the workspace: use a path relative to the workspace "
                f"root or under {WORKSPACE_MOUNT}/"
            )
        path = norm[len(WORKSPACE_MOUNT) + 1 :]
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        raise PathOutsideWorkspace(f"path {user_path!r} climbs out of the workspace with '..'")
    return norm


def resolve(root: str | Path, user_path: str, *, follow_last: bool = True) -> Path:
    """Map `user_path` to a host path under `root`, following symlinks as the sandbox would.

    `follow_last=False` leaves a final symlink itself (for delete and listing). The returned path
    need not exist; every symlink met on the way must stay inside the workspace.
    """
    rel = normalize(user_path)
    root = Path(root)
    parts = [] if rel == "." else rel.split("/")
    resolved: list[str] = []  # components of the resolved path, relative to root
    links = 0
    while parts:
        name = parts.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if not resolved:
                raise PathOutsideWorkspace(f"path {user_path!r} escapes the workspace through '..'")
            resolved.pop()
            continue
        host = root.joinpath(*resolved, name)
        is_last = not parts
        if (follow_last or not is_last) and host.is_symlink():
            links += 1
            if links > _MAX_LINKS:
                raise PathOutsideWorkspace(f"path {user_path!r}: too many levels of symlinks")
            target = os.readlink(host)
            if target.startswith("/"):
                norm = posixpath.normpath(target)
                if norm != WORKSPACE_MOUNT and not norm.startswith(WORKSPACE_MOUNT + "/"):
                    raise PathOutsideWorkspace(
                        f"path {user_path!r} goes through a symlink to {target!r}, outside the workspace"
                    )
                resolved = []
                target = norm[len(WORKSPACE_MOUNT) + 1 :] if norm != WORKSPACE_MOUNT else ""
            parts = [p for p in target.split("/") if p] + parts
            continue
        resolved.append(name)
    return root.joinpath(*resolved)


def relative(root: str | Path, host_path: str | Path) -> str:
    """The workspace-relative POSIX form of a host path under `root` ('.' for the root)."""
    rel = os.path.relpath(host_path, root)
    return "." if rel == "." else rel.replace(os.sep, "/")
