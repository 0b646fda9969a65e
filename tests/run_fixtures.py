"""The tiny training run the integration tests start from, written once.

`tiny_run(tmp_path, changes)` writes `<name>.toml`: the common run (a one-layer model built from a
spec with the quickstart tokenizer, 6 generated tasks, 2 turns, G = 2, two tasks a step, two
steps) with each test's changes merged in table by table (a None value removes a key), and
returns the config's path and the run folder.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import tomli_w

TINY_SPEC = dict(
    hidden_size=32,
    num_layers=1,
    num_heads=2,
    num_kv_heads=1,
    intermediate_size=64,
    max_position_embeddings=512,
)

TINY_RUN: dict[str, Any] = {
    "mode": "async",
    "max_staleness": 1,
    "steps": 2,
    "seed": 0,
    "threads": 1,
    "model": {"spec": TINY_SPEC, "tokenizer": "quickstart"},
    "tasks": {"source": "quickstart", "count": 6, "held_out": 2},
    "harness": {"max_turns": 2},
    "engine": {"max_model_len": 512, "seed": 0},
    "rollout": {
        "group_size": 2,
        "tasks_per_step": 2,
        "concurrency": 8,
        "max_tokens": 12,
        "train_zero_advantage": True,
    },
    "trainer": {"lr": 1e-3},
    "eval": {"samples": 1, "max_tasks": 1},
    "metrics": {"tensorboard": False, "progress": "plain"},
}


def merged(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`base` with `changes` laid over it, tables merged key by key; None removes a key."""
    out = copy.deepcopy(base)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def tiny_run(tmp_path: Path, changes: dict[str, Any] | None = None, *, name: str = "run") -> tuple[str, Path]:
    """Write the tiny run with `changes` as `tmp_path/<name>.toml`; (its path, its run folder)."""
    run_dir = tmp_path / name
    data = merged(TINY_RUN, {**(changes or {}), "run_dir": str(run_dir)})
    path = tmp_path / f"{name}.toml"
    path.write_text(tomli_w.dumps(data))
    return str(path), run_dir
