"""Storage bookkeeping for the bwrap backend: volumes (per-sandbox tmpfs) and snapshots (layer stacks).

A *volume* is one sandbox's scratch space: a tmpfs mounted with `size=disk_mb` when we may mount
(so "disk written" is a hard cap and discarding is instant), else a plain directory. It holds the
overlay upper and work dirs, the sandbox's private /tmp, and the frozen layers of the snapshots
taken in it. Volumes are reference-counted: a snapshot keeps the volumes of its layers alive after
the sandbox that made them is closed; the last release unmounts and deletes.

A *snapshot* is immutable: a base directory (the source the first sandbox was created from, never
written) plus a stack of frozen layers on top (overlay mode), or a full copy (copy mode).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from inhabit.sandbox import hostfs, mounts


class Volume:
    """A sandbox's scratch space; freed when the last reference is released."""

    def __init__(self, path: Path, size_bytes: int | None, owner: tuple[int, int] | None = None):
        self.path = path
        self.refs = 1
        self.mounted = False
        path.mkdir(parents=True)
        if size_bytes is not None:
            mounts.mount_tmpfs(path, size_bytes, mode=0o700, owner=owner)
            self.mounted = True
        elif owner is not None:
            os.chown(path, *owner)

    def acquire(self) -> Volume:
        assert self.refs > 0, "volume already freed"
        self.refs += 1
        return self

    def release(self) -> Callable[[], None] | None:
        """Drop a reference; returns the (slow) freeing work when it was the last, else None.

        The caller decides where that work runs (a worker thread, so unmounting never blocks
        the event loop, or inline at exit).
        """
        assert self.refs > 0, "volume released more often than acquired"
        self.refs -= 1
        return self.free if self.refs == 0 else None

    def free(self) -> None:
        """Discard everything on the volume. A lazy unmount of the tmpfs also detaches every
        mount below it (the sandbox's overlay), so one syscall frees it all."""
        if self.mounted:
            mounts.umount(self.path, detach=True)
            self.mounted = False
        hostfs.remove_tree(self.path)


def run_all(ops: list[Callable[[], None]]) -> None:
    """Run cleanup steps in order; one failing step never stops the rest."""
    for op in ops:
        try:
            op()
        except Exception:
            pass


@dataclass(frozen=True)
class Snapshot:
    """An immutable workspace state: `base` under `layers` (top first), or a full `copy_dir`."""

    snapshot_id: str
    base: Path
    layers: tuple[Path, ...] = ()
    volumes: tuple[Volume, ...] = field(default=(), compare=False)
    copy_dir: Path | None = None

    def lowers(self) -> list[Path]:
        return [*self.layers, self.base]
