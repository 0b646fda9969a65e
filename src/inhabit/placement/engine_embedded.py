"""Engine backend "embedded": inhabit's own engine, `replicas` of them in this process.

One replica is returned as it is (the quickstart's path); more go behind a `ReplicaSet`, which
places each rollout on the least busy one. An embedded engine cannot die apart from the run, so
nothing is restarted.
"""

from __future__ import annotations

from pathlib import Path

from inhabit.inference.engine import InferenceEngine
from inhabit.placement.engine_backends import ReplicaSet, RunEngineConfig, urls_unused


class EmbeddedBackend:
    def problem(self, cfg: RunEngineConfig) -> str | None:
        return urls_unused(cfg)

    def check(self, cfg: RunEngineConfig) -> None:
        """Always starts."""

    def describe(self, cfg: RunEngineConfig) -> str:
        return f"{cfg.replicas} x embedded engine in this process, dtype {cfg.dtype}"

    async def start(
        self, cfg: RunEngineConfig, model_dir: Path, *, version: int, log_dir: Path
    ) -> InferenceEngine:
        from inhabit.inference.embedded import EmbeddedEngine

        engines: list[InferenceEngine] = [
            EmbeddedEngine.from_path(model_dir, cfg.embedded(), version=version) for _ in range(cfg.replicas)
        ]
        return engines[0] if cfg.replicas == 1 else ReplicaSet(engines)


BACKEND = EmbeddedBackend()
