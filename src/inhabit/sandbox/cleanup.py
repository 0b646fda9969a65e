"""Last-resort cleanup of live sandboxes at interpreter exit (shared by backends).

`close()` is the normal way out. This module covers the others: a program that forgets to close,
a crash that unwinds past `async with`, a Ctrl-C. Every live sandbox registers a synchronous
cleanup function; an `atexit` hook runs whatever is still registered (kill processes, unmount,
delete scratch). A SIGKILL of the host process cannot be caught: the bwrap backend therefore
also uses `--die-with-parent`, and providers sweep stale scratch directories at start.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable

_lock = threading.Lock()
_pending: dict[int, Callable[[], None]] = {}
_next = 0


def register(fn: Callable[[], None]) -> int:
    """Register a synchronous, idempotent cleanup; returns a handle for `unregister`."""
    global _next
    with _lock:
        _next += 1
        _pending[_next] = fn
        return _next


def unregister(handle: int) -> None:
    with _lock:
        _pending.pop(handle, None)


def run_all() -> None:
    """Run every registered cleanup (newest first), swallowing errors: exit must not fail."""
    with _lock:
        items = sorted(_pending.items(), reverse=True)
        _pending.clear()
    for _, fn in items:
        try:
            fn()
        except Exception:
            pass


atexit.register(run_all)
