"""A shared/exclusive gate for one sandbox's operations (used by the local backends).

Execs and file operations are *shared*: any number run at once. Snapshot and restore are
*exclusive*: they wait until nothing shared is in flight (a frozen layer or a copied snapshot
must not change while it is taken) and hold new operations off until they are done. New shared
operations queue behind a waiting exclusive one, so a stream of execs cannot starve a snapshot.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable


class Gate:
    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._running = 0
        self._idle = asyncio.Event()
        self._idle.set()

    @contextlib.asynccontextmanager
    async def shared(self, check: Callable[[], None] | None = None) -> AsyncIterator[None]:
        """Run alongside other shared operations; `check` runs once admitted (e.g. 'not closed')."""
        async with self._lock:
            if check is not None:
                check()
            self._running += 1
            self._idle.clear()
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0:
                self._idle.set()

    @contextlib.asynccontextmanager
    async def exclusive(self, before_wait: Callable[[], None] | None = None) -> AsyncIterator[None]:
        """Run alone. `before_wait` runs first (restore uses it to kill running commands)."""
        async with self._lock:
            if before_wait is not None:
                before_wait()
            await self._idle.wait()
            yield

    async def settle(self, timeout: float) -> None:
        """Wait (bounded) until no exclusive operation is in progress."""
        try:
            await asyncio.wait_for(self._lock.acquire(), timeout=timeout)
        except TimeoutError:
            return
        self._lock.release()
