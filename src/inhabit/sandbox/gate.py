"""Who may act on one sandbox at the same time (used by the local backends).

Three kinds of operation:
- *exec*: any number at once.
- *file* (host-side read/write/delete/list): any number at once, but never while an exec runs.
  Processes of a sandbox exist only during its execs (everything a command started is killed
  before its exec returns; between execs only the supervisor, our own code, runs), so a
  host-side file operation never races sandboxed code that could swap a checked directory
  for a symlink between our check and our use (a time-of-check/time-of-use escape: the host
  writes as root). The price: a file operation waits for the execs in flight.
- *exclusive* (snapshot, restore): alone. It waits until nothing else is in flight (a frozen layer
  must not change while it is taken) and new operations wait behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Literal

Kind = Literal["exec", "file"]


class Gate:
    def __init__(self) -> None:
        self._running: dict[str, int] = {"exec": 0, "file": 0}
        self._exclusive = False
        self._exclusive_waiting = 0
        self._changed = asyncio.Event()

    def _bump(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    async def _wait_until(self, admissible: Callable[[], bool]) -> None:
        while not admissible():
            await self._changed.wait()

    @contextlib.asynccontextmanager
    async def shared(
        self, check: Callable[[], None] | None = None, kind: Kind = "exec"
    ) -> AsyncIterator[None]:
        """Run alongside operations of the same kind; `check` runs once admitted (e.g. 'not closed')."""
        other = "file" if kind == "exec" else "exec"
        await self._wait_until(
            lambda: not self._exclusive and not self._exclusive_waiting and not self._running[other]
        )
        if check is not None:
            check()
        self._running[kind] += 1  # no await since the check: admission and count are one step
        try:
            yield
        finally:
            self._running[kind] -= 1
            self._bump()

    @contextlib.asynccontextmanager
    async def exclusive(self, before_wait: Callable[[], None] | None = None) -> AsyncIterator[None]:
        """Run alone. `before_wait` runs first (restore uses it to kill running commands)."""
        self._exclusive_waiting += 1
        try:
            if before_wait is not None:
                before_wait()
            await self._wait_until(lambda: not self._exclusive and not any(self._running.values()))
        except BaseException:
            self._exclusive_waiting -= 1
            self._bump()
            raise
        self._exclusive_waiting -= 1
        self._exclusive = True
        try:
            yield
        finally:
            self._exclusive = False
            self._bump()

    async def settle(self, timeout: float) -> None:
        """Wait (bounded) until no exclusive operation is in progress or waiting."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(
                self._wait_until(lambda: not self._exclusive and not self._exclusive_waiting), timeout
            )
