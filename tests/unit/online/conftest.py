"""Fixtures for the online tests: a tiny dense model folder (the project tokenizer) and helpers."""

from __future__ import annotations

import socket
import time

import httpx
import pytest


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    path = tmp_path_factory.mktemp("models") / "dense-1m"
    return save_model_folder(build_tiny_model("dense-1m", vocab_size=len(tok), seed=0), tok, path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            return httpx.get(f"{url}/health", timeout=2).json()
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("server did not come up")


def synthetic_trajectory(seed: int, version: int = 0, tokens: bool = True) -> dict:
    """A one-turn trajectory record as an engine would report it (ids inside the tiny vocabulary)."""
    import random

    rng = random.Random(seed)
    prompt = [rng.randrange(3, 300) for _ in range(12)]
    completion = [rng.randrange(3, 300) for _ in range(6)]
    turn = {
        "text": "edit",
        "prompt_token_ids": prompt if tokens else None,
        "completion_token_ids": completion if tokens else None,
        "logprobs": [-20.0] * 6 if tokens else None,
        "versions": [version] * 6,
    }
    return {
        "task_id": f"agent:{seed}",
        "instruction": "fix",
        "status": "finished",
        "segments": [{"index": 0, "messages": [], "turns": [turn]}],
    }


def online_config(tmp_path, **overrides):
    from inhabit.online.config import OnlineConfig

    data = {
        "store": str(tmp_path / "sessions.db"),
        "weights": str(tmp_path / "weights"),
        "cycle": {"min_sessions": 2, "poll_s": 0.05},
        "train": {"trainer": {"lr": 1e-3, "micro_batch_tokens": 512}, "updates": 2, "max_lag": 1},
        "watch": {"min_sessions": 4},
    }
    for key, value in overrides.items():
        section, _, name = key.partition("__")
        if name:
            data.setdefault(section, {})[name] = value
        else:
            data[section] = value
    return OnlineConfig.model_validate(data)
