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

from dataclasses import dataclass, field
from pathlib import Path

from inhabit.sandbox import hostfs, mounts


class Volume:
    """A sandbox's scratch space; freed when the last reference is released."""

    def __init__(self, path: Path, size_bytes: int | None):
        self.path = path
        self.refs = 1
        self.mounted = False
        path.mkdir(parents=True)
        if size_bytes is not None:
            mounts.mount_tmpfs(path, size_bytes, mode=0o700)
            self.mounted = True

    def acquire(self) -> Volume:
        assert self.refs > 0, "volume already freed"
        self.refs += 1
        return self

    def release(self) -> None:
        self.refs -= 1
        if self.refs == 0:
            self.free()

    def free(self) -> None:
        """Discard everything on the volume (idempotent)."""
        if self.mounted:
            mounts.umount_all_under(self.path)
            self.mounted = False
        else:
            mounts.umount_all_under(self.path)
            hostfs.remove_tree(self.path)
        if self.path.exists():
            hostfs.remove_tree(self.path)


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
