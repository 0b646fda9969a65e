"""`remove_tree`: remove a directory tree that sandboxed code may have written.

Shared by the sandbox backends (`inhabit.sandbox.hostfs`) and the environment store
(`inhabit.envs.store`), which sits below the sandbox part and so cannot import it.

Protects against: read-only directories left by sandboxed code, and a symlink it planted
turning a chmod onto a host file or the tree's parent. Does not protect against: a process still
writing into the tree while it is removed.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

__all__ = ["remove_tree"]


def remove_tree(path: Path) -> None:
    """Remove a tree, making read-only directories writable first; never raises for absence."""

    top = os.path.abspath(path)

    def _inside(q: str) -> bool:
        return os.path.commonpath([top, os.path.abspath(q)]) == top

    def _onerror(func, p, exc_info):  # type: ignore[no-untyped-def]
        # Sandboxed code may have left read-only dirs; make them writable and retry. Never
        # chmod through a symlink it planted (that would change a host file's mode as root),
        # and never outside the tree: when `path` itself cannot go (a mount still on it), its
        # parent is /dev/shm or /tmp, and a 0700 there locks every other user out of it.
        try:
            for q in (os.path.dirname(p), p):
                if _inside(q) and not os.path.islink(q) and os.path.isdir(q):
                    os.chmod(q, 0o700)
            # Retry only the removals: rmtree also reports os.open / os.scandir / os.lstat failures
            # (an entry that vanished under a concurrent sweep), which take other arguments.
            if func in (os.rmdir, os.unlink, os.remove):
                func(p)
        except OSError:
            pass

    if path.is_symlink() or path.is_file():
        path.unlink(missing_ok=True)
    elif path.exists():
        shutil.rmtree(path, onerror=_onerror)
