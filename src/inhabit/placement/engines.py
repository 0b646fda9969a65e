"""Inference engines on Ray, seen through the ordinary `InferenceEngine` interface.

- `RayEngine`: one engine actor. `generate` is one actor call; a dead actor raises `EngineLost`
  (an `InferenceError`), which the harness turns into a failed turn and the dispatcher into a
  retry elsewhere.
- `EnginePool`: every engine actor as one `InferenceEngine` (what the pipeline holds as
  `runner.engine`). `generate` goes to the live engine with the fewest outstanding requests;
  `version` is the oldest version a live engine holds (so staleness is never underestimated);
  `sync_to(store, version)` tells every live engine to pull that version from the weight store.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inhabit.errors import InferenceError
from inhabit.inference.engine import Completion, GenerationRequest, InferenceEngine
from inhabit.placement.fleet import Fleet, Member

if TYPE_CHECKING:
    import torch


class EngineLost(InferenceError):
    """The engine actor serving a request died (its node went away, or it was killed)."""


class RayEngine(InferenceEngine):
    """An `EngineActor` behind the `InferenceEngine` interface."""

    def __init__(self, handle: Any, info: dict[str, Any]) -> None:
        self.handle = handle
        self._version = int(info["version"])
        self.max_model_len = int(info["max_model_len"])
        self.store_url: str | None = info.get("store")

    @property
    def version(self) -> int:
        return self._version

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        import ray

        try:
            out = await self.handle.generate.remote(list(requests))
        except ray.exceptions.RayActorError as e:
            raise EngineLost(f"engine actor died: {type(e).__name__}") from e
        for c in out:  # note the newest version any token came from
            if c.versions:
                self._version = max(self._version, max(c.versions))
        return out

    async def sync(self, store_url: str, version: int | None) -> int:
        import ray

        try:
            self._version = int(await self.handle.sync.remote(store_url, version))
        except ray.exceptions.RayActorError as e:
            raise EngineLost(f"engine actor died during weight sync: {type(e).__name__}") from e
        self.store_url = store_url
        return self._version

    async def load_weights(self, weights: Mapping[str, torch.Tensor] | str | Path, version: int) -> None:
        """A folder path, or (rarely: it goes through Ray's object store) a state dict."""
        w = str(weights) if isinstance(weights, str | Path) else dict(weights)
        self._version = int(await self.handle.load_weights.remote(w, version))


class EnginePool(InferenceEngine):
    """All engine actors as one engine (see module docstring)."""

    def __init__(self, fleet: Fleet, tokenizer: Any) -> None:
        self.fleet = fleet
        self.tokenizer = tokenizer
        self.outstanding_requests = 0
        self.lost = 0
        # `version` and `stale` read every live engine; the pipeline asks once per group, so both
        # are cached until a sync, a death or a revival can have changed the answer (a scan per
        # group was O(engines) per group, bench/scale.py).
        self._syncs = 0
        self._version: tuple[tuple[int, int], int] | None = None
        self._synced: tuple[tuple[int, int], str, int] | None = None

    def _epoch(self) -> tuple[int, int]:
        return (self._syncs, self.fleet.changes)

    @property
    def max_model_len(self) -> int:
        live = self.fleet.live or self.fleet.members
        return min(m.payload.max_model_len for m in live if m.payload is not None)

    @property
    def version(self) -> int:
        epoch = self._epoch()
        if self._version is not None and self._version[0] == epoch:
            return self._version[1]
        vs = [m.payload.version for m in self.fleet.live]
        v = min(vs) if vs else max((m.payload.version for m in self.fleet.members if m.payload), default=0)
        self._version = (epoch, v)
        return v

    def engine_of(self, member: Member) -> RayEngine:
        return member.payload

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        m = await self.fleet.acquire()
        try:
            return await m.payload.generate(requests)
        except EngineLost:
            self.lost += 1
            self.fleet.mark_dead(m, "generate failed")
            raise
        finally:
            self.fleet.release(m)

    def stale(self, store_url: str, version: int) -> bool:
        """Whether some live engine holds a version older than `version` of `store_url` (or another store)."""
        if self._synced == (self._epoch(), store_url, version):
            return False
        stale = any(m.payload.store_url != store_url or m.payload.version < version for m in self.fleet.live)
        if not stale:
            self._synced = (self._epoch(), store_url, version)
        return stale

    async def sync_to(self, store_url: str, version: int) -> int:
        """Every live engine to `version` of the store (dead ones catch up when they come back)."""

        async def one(m: Member) -> None:
            try:
                await m.payload.sync(store_url, version)
            except EngineLost:
                self.fleet.mark_dead(m, "weight sync failed")

        await asyncio.gather(*(one(m) for m in self.fleet.live))
        self._syncs += 1
        return self.version

    async def load_weights(self, weights: Mapping[str, torch.Tensor] | str | Path, version: int) -> None:
        await asyncio.gather(*(m.payload.load_weights(weights, version) for m in self.fleet.live))
        self._syncs += 1

    async def close(self) -> None:
        """Stops the driver-side revive tasks; the actors belong to the placement (see cluster.py)."""
        await self.fleet.close()
