"""The trainer learns: GRPO on a synthetic reward raises the mean reward of engine rollouts.

Reward 1 when the sampled continuation contains any token of a target set (32 of 512 ids), else 0.
A random-init model samples nearly uniformly, so about 1 - (480/512)^6 ~ 1/3 of rollouts start at
reward 1. Rollouts come from the EmbeddedEngine; after each step the trainer's weights are loaded
into it. With `lag = 1` the engine always runs one version behind (asynchronous RL with staleness
1): the truncated importance weights correct for it.
"""

from __future__ import annotations

import asyncio

import pytest

from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.samples import group_samples
from inhabit.trainer.trainer import Trainer

from .conftest import build, completion_trajectory, generate

TARGET = frozenset(range(100, 132))
STEPS, G = 16, 8
PROMPTS = [[1, 5 + t, 9] for t in range(4)]


@pytest.mark.parametrize("lag", [0, 1])
def test_grpo_raises_the_mean_reward(lag: int) -> None:
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine

    engine = EmbeddedEngine(build("dense-1m"), None, EngineConfig(stop_at_eos=False, seed=0))
    trainer = Trainer(build("dense-1m"), TrainerConfig(lr=3e-3))
    history: list[float] = []
    pending: list[tuple[dict, int]] = []
    max_staleness = 0
    try:
        for step in range(STEPS):
            comps = generate(engine, [p for p in PROMPTS for _ in range(G)], max_tokens=6, seed=step)
            rewards = [float(any(t in TARGET for t in c.token_ids)) for c in comps]
            history.append(sum(rewards) / len(rewards))
            samples = []
            for i in range(len(PROMPTS)):
                group = [
                    completion_trajectory(c, r)
                    for c, r in zip(comps[i * G : (i + 1) * G], rewards[i * G : (i + 1) * G], strict=True)
                ]
                samples += group_samples(group, group_id=str(i))
            if samples:
                metrics = trainer.train_step(samples)
                max_staleness = max(max_staleness, metrics.staleness_max)
                pending.append((trainer.state_dict_for_engine(), trainer.version))
            while len(pending) > lag:
                weights, version = pending.pop(0)
                asyncio.run(engine.load_weights(weights, version))
    finally:
        asyncio.run(engine.close())
    early, late = sum(history[:4]) / 4, sum(history[-4:]) / 4
    assert late > early + 0.3, f"mean reward did not rise: {history}"
    assert late > 0.8, history
    assert max_staleness == lag
