"""The `WeightSync`s: `InProcessWeightSync` (trainer and engines on this machine),
`PublishingWeightSync` (the same, also writing every version to a weight store) and
`StoreWeightSync` (engines on Ray, through the weights part's store).

`InProcessWeightSync` keeps the newest published state dict in memory and hands the tensors to
the engine in `apply`, which swaps them in between two decoding steps.

`StoreWeightSync`: the trainer actor publishes each version to the store itself (full snapshots and lossless
deltas, `inhabit.weights.Publisher`), so `publish` here only notes the version; `apply(pool)`
tells every live engine actor to pull that version (`Subscriber.sync`: the deltas after the one
it holds, or the chain's snapshot) and hot-swap it. Tensors never pass through the driver or
Ray's object store. A state dict handed to `publish` (a trainer in the driver) is written to the
store from here instead.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from inhabit.contracts import WeightSync
from inhabit.placement.engines import EnginePool

if TYPE_CHECKING:
    import torch

    from inhabit.inference.engine import InferenceEngine


class InProcessWeightSync(WeightSync):
    """Keeps the newest published state dict in memory (see module docstring)."""

    def __init__(self) -> None:
        self._latest: tuple[Mapping[str, Any], int] | None = None
        self._lock = asyncio.Lock()
        self.published = 0
        self.applied = 0
        self.apply_seconds = 0.0

    @property
    def latest_version(self) -> int | None:
        return None if self._latest is None else self._latest[1]

    async def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        if self._latest is not None and version <= self._latest[1]:
            raise ValueError(f"published version {version} is not newer than {self._latest[1]}")
        self._latest = (state_dict, version)
        self.published += 1

    async def apply(self, engine: InferenceEngine) -> int:
        async with self._lock:
            if self._latest is not None and self._latest[1] > engine.version:
                state, version = self._latest
                t0 = time.perf_counter()
                await engine.load_weights(dict(state), version)
                self.apply_seconds += time.perf_counter() - t0
                self.applied += 1
            return engine.version


class PublishingWeightSync(InProcessWeightSync):
    """`InProcessWeightSync` that also publishes every version to a weight store (`[weights] store`),
    so engines on other machines can follow a local run; this run's engines still get the tensors
    in memory. Versions are written in order, each as a full snapshot or a lossless delta."""

    def __init__(self, store_url: str, *, dtype: str = "bfloat16") -> None:
        super().__init__()
        from inhabit.weights.publish import Publisher, PublisherConfig

        self.store_url = store_url
        self._publisher = Publisher(store_url, PublisherConfig(dtype=dtype))
        self.store_seconds = 0.0

    async def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        await super().publish(state_dict, version)
        t0 = time.perf_counter()
        await asyncio.to_thread(self._publisher.publish, state_dict, version)
        self.store_seconds += time.perf_counter() - t0


class StoreWeightSync(WeightSync):
    """Engine actors follow the weight store (see module docstring)."""

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
