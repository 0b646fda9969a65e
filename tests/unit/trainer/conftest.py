"""Fixtures and helpers for the trainer tests: tiny models (small vocabulary, so steps are fast) and
rollouts turned into trajectory records the way the harness writes them."""

from __future__ import annotations

import asyncio

import pytest

VOCAB = 512


def build(preset: str, seed: int = 0):
    from inhabit.models.tiny import build_tiny_model

    return build_tiny_model(preset, vocab_size=VOCAB, seed=seed)


@pytest.fixture
def dense():
    return build("dense-1m")


@pytest.fixture
def moe():
    return build("moe-2m")


def completion_trajectory(comp, reward: float, task_id: str = "task"):
    """A one-turn trajectory record holding an engine completion (what the harness would write)."""
    from inhabit.types import Segment, Trajectory, TurnRecord

    turn = TurnRecord(
        text=comp.text,
        prompt_token_ids=comp.prompt_token_ids,
        completion_token_ids=comp.token_ids,
        logprobs=comp.logprobs,
        routed_experts=comp.routed_experts,
        versions=comp.versions,
    )
    return Trajectory(
        task_id=task_id,
        instruction="",
        status="finished",
        reward=reward,
        segments=[Segment(index=0, messages=[], turns=[turn])],
    )


def generate(engine, prompts, *, max_tokens: int, seed: int, temperature: float = 1.0):
    """Sample one completion per prompt from an EmbeddedEngine (blocking)."""
    from inhabit.inference.engine import GenerationRequest, SamplingParams

    reqs = [
        GenerationRequest(
            list(p), SamplingParams(temperature=temperature, max_tokens=max_tokens, seed=seed * 10_000 + i)
        )
        for i, p in enumerate(prompts)
    ]
    return asyncio.run(engine.generate(reqs))
