"""`StoreWeightSync`: weight sync through the weights part's store, for engines on Ray.

The trainer actor publishes each version to the store itself (full snapshots and lossless
deltas, `inhabit.weights.Publisher`), so `publish` here only notes the version; `apply(pool)`
tells every live engine actor to pull that version (`Subscriber.sync`: the deltas after the one
it holds, or the chain's snapshot) and hot-swap it. Tensors never pass through the driver or
Ray's object store. A state dict handed to `publish` (a trainer in the driver) is written to the
store from here instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from inhabit.orchestrator.weight_sync import WeightSync
from inhabit.placement.engines import EnginePool


class StoreWeightSync(WeightSync):
    """See module docstring."""

    def __init__(self, store_url: str, version: int, *, dtype: str = "float32") -> None:
        self.store_url = store_url
        self.latest = version
        self.dtype = dtype
        self._publisher: Any = None
        self._lock = asyncio.Lock()
        self.applied = 0

    async def publish(self, state_dict: Mapping[str, Any], version: int) -> None:
        if state_dict:
            from inhabit.weights.publish import Publisher, PublisherConfig

            if self._publisher is None:
                self._publisher = Publisher(self.store_url, PublisherConfig(dtype=self.dtype))
            await asyncio.to_thread(self._publisher.publish, state_dict, version)
        self.latest = version

    async def apply(self, engine: Any) -> int:
        assert isinstance(engine, EnginePool), "StoreWeightSync drives an EnginePool"
        async with self._lock:
            if engine.stale(self.store_url, self.latest):
                await engine.sync_to(self.store_url, self.latest)
                self.applied += 1
        return engine.version
