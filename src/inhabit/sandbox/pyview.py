"""The Python installation inside bwrap sandboxes, at neutral paths (root only).

Bound at their host paths, the interpreter prefix and the virtual environment name the host's
layout in every place a curious process looks: PATH, the mount table (a bind mount shows its
source path), every script's `#!` line (`/home/dev/project/.venv/bin/python`, say). Here each of them is
shown at the machine profile's place instead (`python_dir`, `venv_dir`; /opt/python and
/opt/venv by default) as a read-only overlay of two layers, mounted once per provider:
- a small top layer on the provider's tmpfs: the venv's `bin/` scripts and symlinks and its
  `pyvenv.cfg` with the host paths rewritten to the new ones, and whiteouts that hide inhabit's
  own install (its dist-info, `.pth` and console script: nothing inside the sandbox runs it);
- the real tree, through a read-only bind under the same tmpfs.
The overlay's options name both layers relative to that tmpfs (`lowerdir+=top1,lowerdir+=src1`),
so the mount table shows no host path.

The host paths still resolve inside (`host_python_links`, on by default): a symlink at each
points to the new place, so commands written with the host's paths (`sys.executable` in a
caller, a built task's test command, the interpreter's own RUNPATH) run unchanged. `ls /` shows
the top directory of those paths; nothing else does. Without root (no mounts) the trees are
bound at their own paths as before.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path

from inhabit.log import get_logger
from inhabit.sandbox import mounts
from inhabit.sandbox.machine import MachineProfile

log = get_logger(__name__)

# Entries of inhabit's own install, hidden by whiteouts in the top layer.
_OWN = ("inhabit-", "inhabit.", "__editable__.inhabit-", "__editable___inhabit_")


@dataclass
class PythonView:
    """bwrap arguments that show the Python roots inside, and where the scripts' bin is."""

    argv: list[str] = field(default_factory=list)
    bin_dir: str | None = None  # first on PATH inside


def _swap(text: str, pairs: list[tuple[str, str]]) -> str:
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def _is_own(name: str) -> bool:
    return name == "inhabit" or name.startswith(_OWN)


def _whiteout(path: Path) -> None:
    """An overlay whiteout (char device 0:0): hides `path`'s name in the layers below."""
    with contextlib.suppress(OSError):  # no CAP_MKNOD: leave the entry visible
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(0, 0))


def build_top(src: Path, top: Path, pairs: list[tuple[str, str]]) -> None:
    """The rewritten top layer of `src` (see the module docstring) in the new dir `top`."""
    top.mkdir(mode=0o755)
    bin_dir = src / "bin"
    if bin_dir.is_dir():
        (top / "bin").mkdir(mode=0o755)
        for f in bin_dir.iterdir():
            dst = top / "bin" / f.name
            if f.is_symlink():
                target = os.readlink(f)
                if _swap(target, pairs) != target:
                    dst.symlink_to(_swap(target, pairs))
                continue
            if not f.is_file() or f.stat().st_size > 1 << 20:
                continue
            data = f.read_bytes()
            if not (data.startswith(b"#!") or f.name.startswith("activate")):
                continue  # a binary (the interpreter): never edited
            if b"from inhabit" in data or b"import inhabit" in data:
                _whiteout(dst)
                continue
            try:
                text = data.decode()
            except UnicodeDecodeError:
                continue
            if _swap(text, pairs) != text:
                dst.write_text(_swap(text, pairs))
                dst.chmod(f.stat().st_mode & 0o777)
    cfg = src / "pyvenv.cfg"
    if cfg.is_file():
        (top / "pyvenv.cfg").write_text(_swap(cfg.read_text(), pairs))
        (top / "pyvenv.cfg").chmod(0o644)
    for site in src.glob("lib/python*/site-packages"):
        own = [p.name for p in site.iterdir() if _is_own(p.name)]
        if own:
            dst = top / site.relative_to(src)
            dst.mkdir(parents=True, exist_ok=True)
            for name in own:
                _whiteout(dst / name)
    for d in [top, *top.rglob("*")]:
        if d.is_dir() and not d.is_symlink():
            d.chmod(0o755)


def relocate(roots: list[Path], fs: Path, machine: MachineProfile) -> PythonView | None:
    """Mount the views under `fs` (a tmpfs of the provider) and return how to bind them.

    None when a mount fails (the caller binds the roots at their own paths instead).
    """
    prefix = Path(sys.prefix).resolve()
    base = Path(sys.base_prefix).resolve()
    places: dict[Path, str] = {}
    for root in roots:
        if root == prefix and prefix != base:
            places[root] = machine.venv_dir
        elif root == base:
            places[root] = machine.python_dir
    if not places:
        return None
    pairs = sorted(((str(r), d) for r, d in places.items()), key=lambda p: -len(p[0]))
    view = PythonView()
    try:
        for i, root in enumerate(roots):
            if root not in places:
                view.argv += ["--ro-bind", str(root), str(root)]  # neither prefix: as it is
                continue
            src, top, merged = fs / f"src{i}", fs / f"top{i}", fs / f"py{i}"
            for d in (src, merged):
                d.mkdir(mode=0o755)
            mounts.bind_ro(root, src)
            build_top(root, top, pairs)
            mounts.mount_overlay([top, src], None, None, merged, relative_to=fs)
            view.argv += ["--ro-bind", str(merged), places[root]]
    except OSError as e:
        log.warning("could not show Python at %s (%s): bound at its host paths", places, e)
        for i in range(len(roots)):
            for name in (f"py{i}", f"src{i}"):
                with contextlib.suppress(OSError):
                    mounts.umount(fs / name)
        return None
    if machine.host_python_links:
        for root, place in places.items():
            host = str(root)
            overlaps = any(
                host == p or host.startswith(p + "/") or p.startswith(host + "/") for p in places.values()
            )
            if not overlaps:
                view.argv += ["--symlink", place, host]
    view.bin_dir = f"{places.get(prefix, str(prefix))}/bin"
    return view
