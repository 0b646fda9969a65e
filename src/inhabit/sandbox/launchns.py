"""A mount namespace of the provider's own to start bwrap in (root only): a short mount table.

bwrap 0.11 reads the whole of /proc/self/mountinfo after each of its bind and remount steps (17
per sandbox), and the table it reads is a copy of the one it was started from, host mounts and
all. Its start therefore costs about 0.06 ms of CPU per mount in the host's table, whoever made
them: 11 ms per sandbox on an empty host, 55 ms with 724 mounts of other programs' sandboxes (see
docs/results.md, "One bwrap per sandbox"). So, as root, the provider keeps one namespace whose
table holds only what bwrap and its launcher read: /usr, /etc and the top-level links or
directories beside them, the six device nodes bwrap binds into each sandbox's /dev, the two /sys
parts `sysview` shows, the Python roots, and the provider's scratch tree. The launcher enters it
with nsenter, which also drops to the sandbox uid (in place of setpriv), or the compiled launcher
(`_launcher.c`) does both itself; cgroups and rlimits are set before that, in the host's namespace.

The scratch tree is made a shared mount point before anything is mounted under it, and the
namespace holds a slave copy of it: every volume, overlay and view the provider mounts later on
the host appears there too (and its unmounting too), and nothing mounted in the namespace goes
back. A process (`sh`, waking once a second) holds the namespace and exits when the provider's
process is gone or the provider closes.

Protects nothing by itself and opens nothing: the sandbox's own namespace is still built by
bwrap from binds, as before; what changes is the table bwrap copies (shorter), and that the
scratch tree's mounts now propagate to the slave copies of it (this namespace's, and the copies
in each bwrap's namespace until bwrap detaches its old root at the end of its setup).
"""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import shutil
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path

from inhabit.log import get_logger

log = get_logger(__name__)

# The device nodes bwrap's --dev binds from the table it starts in (bubblewrap's `devnodes`).
DEVICES = ("null", "zero", "full", "random", "urandom", "tty")
READY = "inhabit-launch-namespace-ready"
SETUP_TIMEOUT_S = 20.0


class LaunchNamespace:
    """The holder of the namespace, and the argv prefix that enters it (`enter`)."""

    def __init__(self, holder: subprocess.Popen[bytes], nsenter: str):
        self._holder = holder
        self._nsenter = nsenter

    def enter(self, ids: tuple[int, int] | None = None) -> list[str]:
        """argv prefix (run as root) that enters the namespace and, given `ids` (uid, gid),
        drops to them on the way: nsenter's -S/-G set the real, effective and saved ids and
        clear the supplementary groups, leaving no capabilities (what `setpriv --reuid --regid
        --clear-groups` does), so the drop costs no exec of its own."""
        argv = [self._nsenter, f"--mount=/proc/{self._holder.pid}/ns/mnt"]
        if ids is not None:
            argv += ["-S", str(ids[0]), "-G", str(ids[1])]
        return [*argv, "--"]

    @property
    def pid(self) -> int:
        """A process in the namespace (its table: /proc/<pid>/mountinfo)."""
        return self._holder.pid

    @property
    def alive(self) -> bool:
        return self._holder.poll() is None

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            self._holder.send_signal(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            self._holder.wait(timeout=5)


def start(root: Path, keep: Sequence[Path], sys_parts: Sequence[Path]) -> LaunchNamespace | None:
    """A launch namespace showing `root` (already a shared mount point, see module docstring),
    the Python roots `keep` and the /sys directories `sys_parts`; None (logged) where it cannot
    be made here (then bwrap starts from the host's table, as without it)."""
    unshare, nsenter = shutil.which("unshare"), shutil.which("nsenter")
    pivot = shutil.which("pivot_root") or "/usr/sbin/pivot_root"
    if unshare is None or nsenter is None or not Path(pivot).exists():
        log.info("no launch namespace for bwrap (util-linux unshare, nsenter or pivot_root missing)")
        return None
    new = root / "launch"
    new.mkdir(mode=0o700)
    script = _setup_script(root, new, keep, sys_parts, pivot)
    try:
        holder = subprocess.Popen(
            [unshare, "--mount", "--propagation", "slave", "--", "/bin/sh", "-c", script],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as e:
        log.info("no launch namespace for bwrap (%s)", e)
        return None
    assert holder.stdout is not None
    line = ""
    if select.select([holder.stdout], [], [], SETUP_TIMEOUT_S)[0]:
        line = holder.stdout.readline().decode(errors="replace").strip()
    if line != READY:
        err = b""
        with contextlib.suppress(subprocess.TimeoutExpired, OSError):
            holder.kill()
            _, err = holder.communicate(timeout=5)
        log.info("no launch namespace for bwrap: %s", err.decode(errors="replace").strip()[-300:] or line)
        return None
    holder.stdout.close()
    if holder.stderr is not None:
        holder.stderr.close()
    return LaunchNamespace(holder, nsenter)


def _setup_script(root: Path, new: Path, keep: Sequence[Path], sys_parts: Sequence[Path], pivot: str) -> str:
    """The shell steps, run inside the new namespace (all mounts there are slaves: nothing goes back)."""
    q = shlex.quote
    n = q(str(new))
    steps = [
        "set -e",
        f"mount -t tmpfs -o mode=0755,size=1m inhabit-launch {n}",
        # Pruned from the recursive bind of `root` below, which holds it.
        f"mount --make-unbindable {n}",
    ]

    def under(p: Path) -> str:
        return q(f"{new}{p}")

    for top in ("usr", "etc"):
        steps += [f"mkdir -p {under(Path('/' + top))}", f"mount --rbind /{top} {under(Path('/' + top))}"]
    for entry in sorted(os.listdir("/")):
        p = Path("/") / entry
        if entry in ("usr", "etc") or not (entry.startswith(("bin", "sbin", "lib"))):
            continue
        if p.is_symlink():
            steps.append(f"ln -s {q(os.readlink(p))} {under(p)}")
        elif p.is_dir():
            steps += [f"mkdir -p {under(p)}", f"mount --rbind {q(str(p))} {under(p)}"]
    steps.append(f"mkdir -p {under(Path('/proc'))} && mount --bind /proc {under(Path('/proc'))}")
    steps.append(f"mkdir -p {under(Path('/tmp'))}")  # bwrap mounts its new root's tmpfs there
    steps.append(f"mkdir -p {under(Path('/dev'))}")
    for dev in DEVICES:
        src = Path("/dev") / dev
        steps.append(f"touch {under(src)} && mount --bind {q(str(src))} {under(src)}")
    for p in [*sys_parts, *_outermost(keep)]:
        steps += [f"mkdir -p {under(p)}", f"mount --rbind {q(str(p))} {under(p)}"]
    steps += [
        f"mkdir -p {under(root)}",
        f"mount --rbind {q(str(root))} {under(root)}",
        f"mkdir {n}/.old",
        f"cd {n}",
        f"{q(pivot)} . .old",
        "cd /",
        "umount -l /.old",
        "rmdir /.old",
        f"echo {READY}",
        # Hold the namespace while the provider's process lives.
        f"while kill -0 {os.getpid()} 2>/dev/null; do sleep 1; done",
    ]
    return "\n".join(steps)


def _outermost(paths: Sequence[Path]) -> list[Path]:
    """`paths` without those inside another of them (a recursive bind brings those along)."""
    out: list[Path] = []
    for p in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(p == o or o in p.parents for o in out):
            out.append(p)
    return out
