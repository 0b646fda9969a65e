"""Engine backend "remote": OpenAI-compatible servers at `engine.urls` that return inhabit's RL
fields (`inhabit serve`, vLLM or SGLang, said by `engine.flavor`), one replica per URL.

A remote server cannot be restarted from here: its failed turns are data, as for any engine error.
"""

from __future__ import annotations

from pathlib import Path

from inhabit.inference.engine import InferenceEngine
from inhabit.placement.engine_backends import ReplicaSet, RunEngineConfig


class RemoteBackend:
    def problem(self, cfg: RunEngineConfig) -> str | None:
        if not cfg.urls:
            return "engine.backend = 'remote' needs engine.urls (one or more server roots)"
        return None

    def check(self, cfg: RunEngineConfig) -> None:
        """Nothing to find on this machine; an unreachable server is each turn's error."""

    def describe(self, cfg: RunEngineConfig) -> str:
        return f"remote ({cfg.flavor}): {', '.join(cfg.urls)}; a rollout goes to the least busy server"

    async def start(
        self, cfg: RunEngineConfig, model_dir: Path, *, version: int, log_dir: Path
    ) -> InferenceEngine:
        from inhabit.inference.remote import RemoteConfig, RemoteEngine

        remotes: list[InferenceEngine] = [
            RemoteEngine(RemoteConfig(base_url=u, flavor=cfg.flavor, api_key=cfg.api_key), version=version)
            for u in cfg.urls
        ]
        return ReplicaSet(remotes)


BACKEND = RemoteBackend()
