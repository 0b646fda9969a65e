"""`WeightSync`: how a new policy version travels from the trainer to the inference engine.

The trainer side calls `publish(state_dict, version)`; the rollout side calls `apply(engine)`,
which loads the newest published version into the engine if it is newer than what the engine
holds (the engine swaps between decoding steps). `InProcessWeightSync` hands the tensors over in
memory (trainer and engine in one process). The weights part (`inhabit.weights`: full snapshots
plus deltas, checksums, transfer across machines) plugs in behind the same two methods.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from inhabit.inference.engine import InferenceEngine


class WeightSync(abc.ABC):
    """Publish on the trainer side, apply on the engine side."""

    @abc.abstractmethod
    async def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Make `version` available to subscribers."""

    @abc.abstractmethod
    async def apply(self, engine: InferenceEngine) -> int:
        """Load the newest published version into `engine` if newer; return the engine's version."""


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
        import time

        async with self._lock:
            if self._latest is not None and self._latest[1] > engine.version:
                state, version = self._latest
                t0 = time.perf_counter()
                await engine.load_weights(dict(state), version)
                self.apply_seconds += time.perf_counter() - t0
                self.applied += 1
            return engine.version
