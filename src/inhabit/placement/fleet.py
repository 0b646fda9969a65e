"""`Fleet`: a set of like actors (engines, or env servers), their load, and their health.

Each member is one actor slot. Dispatch takes the live member with the least outstanding work
(rollouts it is running; ties go to the one that has served fewer), so a slow or busy actor gets
less. When a call shows a member dead, `mark_dead` takes it out of rotation and starts a revive
task: the actors are created with `max_restarts=-1`, so Ray restarts a dead one as soon as some
node offers its resources again; the revive task's `activate` call (e.g. `ready()`) is queued by
Ray until then, and the member rejoins rotation once it answers. If Ray gives the actor up for
good, the task creates a fresh actor for the slot. Capacity that never returns just leaves the
slot pending; the others carry on.

`pick` keeps the live members in a heap keyed by (outstanding, served, index), with stale entries
dropped as they surface: O(log n) per pick and release rather than a scan of every member, which
at 1,000 engines cost more control-plane CPU per rollout than the rest of dispatch
(bench/scale.py).
"""

from __future__ import annotations

import asyncio
import heapq
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from inhabit.errors import OrchestratorError
from inhabit.log import get_logger

log = get_logger(__name__)


class NoLiveActor(OrchestratorError):
    """No member of a fleet came up in time (check that some node offers the resources asked for)."""


@dataclass
class Member:
    """One actor slot of a fleet."""

    index: int
    handle: Any
    _live: bool = False
    payload: Any = None
    """What `activate` returned: the driver-side view of the actor (engine proxy, sandbox provider)."""
    outstanding: int = 0
    served: int = 0
    deaths: int = 0
    info: dict[str, Any] = field(default_factory=dict)
    on_live: Callable[[Member], None] | None = field(default=None, repr=False, compare=False)
    """Called when the member (re)joins rotation: the fleet puts it back in its heap."""

    @property
    def live(self) -> bool:
        return self._live

    @live.setter
    def live(self, value: bool) -> None:
        was, self._live = self._live, value
        if value and not was and self.on_live is not None:
            self.on_live(self)


class Fleet:
    """Least-outstanding-work dispatch over actor slots, with death detection and revival."""

    def __init__(
        self,
        name: str,
        handles: list[Any],
        activate: Callable[[Member], Awaitable[Any]],
        recreate: Callable[[int], Any],
        *,
        wait_s: float = 600.0,
    ) -> None:
        self.name = name
        self.members = [Member(i, h, on_live=self._push) for i, h in enumerate(handles)]
        self._activate, self._recreate = activate, recreate
        self.wait_s = wait_s
        self._changed = asyncio.Condition()
        self._reviving: dict[int, asyncio.Task] = {}
        self.revived = 0
        self.changes = 0
        """Members that died or came back so far: what a cache over the live members keys on."""
        # (outstanding, served, index) of live members; an entry is current while it equals the
        # member's key (older ones are skipped when popped, and the heap rebuilt when they pile up).
        self._heap: list[tuple[int, int, int]] = []

    async def start(self, all_within_s: float = 60.0) -> None:
        """Activate every member (in parallel); returns once all are live, or (after
        `all_within_s`) once at least one is: the rest join when their resources appear."""
        for m in self.members:
            self._revive(m)
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(self.all_live), all_within_s)
            except TimeoutError:
                pass
            try:
                await asyncio.wait_for(self._changed.wait_for(self.any_live), self.wait_s)
            except TimeoutError:
                raise NoLiveActor(
                    f"no {self.name} actor started within {self.wait_s:g} s: does any node offer the "
                    "resources they ask for (placement.ray.*.resources, `ray start --resources`)?"
                ) from None

    def all_live(self) -> bool:
        return all(m.live for m in self.members)

    def any_live(self) -> bool:
        return any(m.live for m in self.members)

    @property
    def live(self) -> list[Member]:
        return [m for m in self.members if m.live]

    def pick(self, avoid: set[int] = frozenset()) -> Member | None:  # type: ignore[assignment]
        """The live member with the least outstanding work (preferring ones not in `avoid`)."""
        heap, members = self._heap, self.members
        if len(heap) > 4 * len(members) + 64:
            self._rebuild()
        skipped: list[tuple[int, int, int]] = []
        found: Member | None = None
        while heap:
            key = heap[0]
            m = members[key[2]]
            if not m.live or key != (m.outstanding, m.served, m.index):
                heapq.heappop(heap)  # stale: the member moved on or died
                continue
            if m.index in avoid:
                skipped.append(heapq.heappop(heap))
                continue
            found = m
            break
        for key in skipped:
            heapq.heappush(heap, key)
        if found is None and skipped:  # every live member is to be avoided: take the best anyway
            found = members[skipped[0][2]]
        return found

    def _rebuild(self) -> None:
        self._heap = [(m.outstanding, m.served, m.index) for m in self.members if m.live]
        heapq.heapify(self._heap)

    def _push(self, m: Member) -> None:
        if m.live:
            heapq.heappush(self._heap, (m.outstanding, m.served, m.index))

    async def acquire(self, avoid: set[int] = frozenset()) -> Member:  # type: ignore[assignment]
        """Reserve a live member for one unit of work (waits while none is live)."""
        async with self._changed:
            try:
                await asyncio.wait_for(self._changed.wait_for(self.any_live), self.wait_s)
            except TimeoutError:
                raise NoLiveActor(f"no live {self.name} actor for {self.wait_s:g} s") from None
            m = self.pick(avoid)
            assert m is not None
            m.outstanding += 1
            m.served += 1
            self._push(m)
            return m

    def release(self, m: Member) -> None:
        m.outstanding -= 1
        self._push(m)

    def mark_dead(self, m: Member, why: str) -> None:
        """Take `m` out of rotation and revive it in the background (idempotent)."""
        if m.live:
            m.live = False
            m.deaths += 1
            self.changes += 1
            log.warning("%s %d is down (%s); it rejoins when Ray restarts it", self.name, m.index, why)
        self._revive(m)

    def _revive(self, m: Member) -> None:
        if m.index in self._reviving and not self._reviving[m.index].done():
            return
        self._reviving[m.index] = asyncio.create_task(
            self._revive_loop(m), name=f"revive-{self.name}-{m.index}"
        )

    async def _revive_loop(self, m: Member) -> None:
        delay = 0.2
        first = m.deaths == 0
        while True:
            try:
                m.payload = await self._activate(m)
            except Exception as e:
                if _gone_for_good(e):  # Ray gave up on this actor: a new one
                    log.warning("%s %d is gone for good (%s); creating a new actor", self.name, m.index, e)
                    m.handle = self._recreate(m.index)
                    continue
                # restarting, or its node just went away: try again
                log.info("%s %d not ready yet: %s", self.name, m.index, e)
                await asyncio.sleep(delay)
                delay = min(5.0, delay * 2)
                continue
            else:
                break
        async with self._changed:
            m.live = True  # back in the heap (Member.on_live)
            self.changes += 1
            if not first:
                self.revived += 1
                log.warning("%s %d is back", self.name, m.index)
            self._changed.notify_all()

    def stats(self) -> dict[str, Any]:
        return {
            "live": len(self.live),
            "size": len(self.members),
            "deaths": sum(m.deaths for m in self.members),
            "revived": self.revived,
            "served": [m.served for m in self.members],
        }

    async def close(self) -> None:
        for t in self._reviving.values():
            t.cancel()
        await asyncio.gather(*self._reviving.values(), return_exceptions=True)


def _gone_for_good(e: Exception) -> bool:
    """Whether Ray gave the actor up (ActorDiedError); never true without Ray imported (a fleet of
    simulated actors, `inhabit.orchestrator.scale`)."""
    ray = sys.modules.get("ray")
    return ray is not None and isinstance(e, ray.exceptions.ActorDiedError)
