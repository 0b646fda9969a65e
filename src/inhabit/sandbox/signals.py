"""A clean signal state for every sandboxed process, whatever state inhabit itself started in.

Ignored signals and the signal mask survive `exec`: when `inhabit` is started with `&` from a
script (SIGINT and SIGQUIT ignored), under `nohup` (SIGHUP ignored) or by a parent that blocked a
signal, every process it starts inherits that, and inside a sandbox KeyboardInterrupt tests fail
and Ctrl-C means something else than on a developer's machine. Python's subprocess only restores
the signals Python itself ignores (SIGPIPE, SIGXFSZ).

`clean_start_prefix()` is an argv prefix (`env --default-signal`, GNU coreutils 8.31+) that sets
every disposition to default and unblocks every signal before the next program runs. It is empty
when the calling thread has nothing to reset (the common case), so a normal exec pays nothing.
"""

from __future__ import annotations

import functools
import shutil
import signal
import subprocess

from inhabit.log import get_logger

log = get_logger(__name__)

# Python ignores these itself and subprocess's restore_signals resets them in every child.
_PYTHON_RESTORES = (1 << (signal.SIGPIPE - 1)) | (1 << (signal.SIGXFSZ - 1))
# The signals between 32 and SIGRTMIN (32 and 33 with glibc) belong to the C library: sigaction
# refuses them, so no program (nor `env --default-signal`) can change or use them, and the C
# library installs its own handlers when it needs them. GNU make starts every recipe with both
# ignored; they are left out rather than paid for with a reset prefix that cannot reset them.
LIBC_RESERVED = sum(1 << (s - 1) for s in range(32, signal.SIGRTMIN))


def inherited_state() -> tuple[int, int]:
    """(ignored, blocked) signal bit masks of the calling thread that a child would inherit.

    The mask is asked of the kernel on every call (it is per thread); ignored signals are those
    ignored when this process started (read once) plus those Python code has ignored since.
    """
    blocked = sum(1 << (s - 1) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))
    ignored = _ignored_at_start()
    for s in _SIGNALS:
        if signal.getsignal(s) == signal.SIG_IGN:
            ignored |= 1 << (s - 1)
    return ignored & ~_PYTHON_RESTORES & ~LIBC_RESERVED, blocked & ~LIBC_RESERVED


# Standard signals only: a realtime signal ignored from the start is in _ignored_at_start, and
# Python code ignoring one later is rare enough not to pay 30 more lookups per exec.
_SIGNALS = tuple(s for s in signal.valid_signals() if s < signal.SIGRTMIN)


@functools.lru_cache(maxsize=1)
def _ignored_at_start() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("SigIgn:"):
                    return int(line.split()[1], 16)
    except OSError:
        pass
    return 0


@functools.lru_cache(maxsize=1)
def _reset_argv() -> tuple[str, ...] | None:
    """The argv prefix that resets signals, or None (with a warning) where env cannot."""
    env = shutil.which("env") or "/usr/bin/env"
    argv = (env, "--default-signal")
    try:
        ok = subprocess.run([*argv, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        ok = False
    if not ok:
        log.warning(
            "this process has ignored or blocked signals that sandboxed processes would inherit, and "
            "%s does not support --default-signal (GNU coreutils 8.31+ does): install coreutils, or "
            "start inhabit without `&`/nohup",
            env,
        )
        return None
    return argv


def clean_start_prefix() -> list[str]:
    """`env --default-signal` when the calling thread would pass on ignored/blocked signals, else []."""
    ignored, blocked = inherited_state()
    if not (ignored or blocked):
        return []
    argv = _reset_argv()
    return list(argv) if argv else []
