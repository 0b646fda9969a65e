"""What the Ray integration tests share: a tiny model folder and a one-node Ray run config.

Each test module starts its own one-node Ray (`ray_session`) with custom resources "rollout"
(one per engine actor) and "sandbox" (the env server), so actors land by those, never by CPUs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

TINY_SPEC = dict(
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=64,
    max_position_embeddings=512,
)


def tiny_model_folder(dest: Path) -> Path:
    """A servable random-init model folder with the quickstart tokenizer."""
    from inhabit.models.tiny import TinyModelSpec, build_tiny_model, save_model_folder
    from inhabit.orchestrator.quickstart.bootstrap import quickstart_tokenizer

    tok = quickstart_tokenizer()
    model = build_tiny_model(TinyModelSpec(**TINY_SPEC), vocab_size=(len(tok) + 63) // 64 * 64)
    return save_model_folder(model, tok, dest)


def ray_run_config(model: Path, tasks_dir: Path, *, engines: int, concurrency: int, timeout_s: int) -> Any:
    """A one-turn run config on a one-node Ray: `engines` engine actors and one env server."""
    from inhabit.orchestrator.config import RunConfig

    return RunConfig.model_validate(
        {
            "model": {"path": str(model)},
            "tasks": {"source": "dir", "dir": str(tasks_dir)},
            "harness": {"max_turns": 1},
            "engine": {"max_model_len": 512, "seed": 0, "num_threads": 1},
            "sandbox": {"backend": "process"},
            "rollout": {"group_size": 2, "concurrency": concurrency, "max_tokens": 8, "timeout_s": timeout_s},
            "placement": {
                "backend": "ray",
                "ray": {
                    "engines": engines, "env_servers": 1, "bind_host": "127.0.0.1",
                    "engine": {"num_cpus": 0, "resources": {"rollout": 1}},
                    "env_server": {"num_cpus": 0, "resources": {"sandbox": 1}},
                },
            },
        }
    )  # fmt: skip


@contextlib.contextmanager
def ray_session(cfg: Any, store: Path) -> Iterator[Any]:
    """Ray started for `cfg` (one CPU, its resources) and its placement; both shut down after."""
    import ray

    from inhabit.placement.cluster import RayPlacement, runtime_env

    engines = cfg.placement.ray.engines
    ray.init(
        num_cpus=1, resources={"rollout": engines, "sandbox": 1}, include_dashboard=False,
        runtime_env=runtime_env(), log_to_driver=False,
    )  # fmt: skip
    placement = RayPlacement(cfg)
    placement.store_url = str(store)  # an empty store: engines keep their initial weights
    try:
        yield placement
    finally:
        placement.shutdown()
        ray.shutdown()
