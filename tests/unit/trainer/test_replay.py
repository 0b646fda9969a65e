"""Router replay: rollouts from the engine (MoE), a trainer whose router weights drifted slightly, so
free routing picks other experts; replay forces the recorded ones."""

from __future__ import annotations

import asyncio

import pytest
import torch

from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.samples import group_samples
from inhabit.trainer.trainer import Trainer

from .conftest import VOCAB, build, completion_trajectory, generate


@pytest.fixture(scope="module")
def engine_samples():
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine

    engine = EmbeddedEngine(build("moe-2m"), None, EngineConfig(stop_at_eos=False, seed=0))
    try:
        g = torch.Generator().manual_seed(0)
        prompts = [torch.randint(10, VOCAB, (12,), generator=g).tolist() for _ in range(8)]
        comps = generate(engine, prompts, max_tokens=24, seed=0)
    finally:
        asyncio.run(engine.close())
    samples = group_samples([completion_trajectory(c, float(i % 2)) for i, c in enumerate(comps)])
    assert len(samples) == 8 and all(s.routed_experts is not None for s in samples)
    return samples


def drifted_trainer(replay: bool, noise: float) -> Trainer:
    """The engine's weights with the routers nudged (as bf16 rounding or a stale copy would)."""
    model = build("moe-2m")
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("mlp.gate.weight"):
                p.add_(noise * torch.randn(p.shape, generator=g))
    return Trainer(model, TrainerConfig(router_replay=replay))


def test_same_weights_agree_exactly_with_or_without_replay(engine_samples) -> None:
    for replay in (True, False):
        m = drifted_trainer(replay, 0.0).measure(engine_samples)
        assert m.routing_disagreement == 0.0
        assert m.mismatch_mean_abs < 1e-5 and m.mismatch_kl_k3 < 1e-9


def test_replay_drives_routing_disagreement_to_zero_and_lowers_the_mismatch(engine_samples) -> None:
    free = drifted_trainer(False, 1e-2).measure(engine_samples)
    replayed = drifted_trainer(True, 1e-2).measure(engine_samples)
    assert free.routing_disagreement > 0.1
    assert replayed.routing_disagreement == 0.0
    assert replayed.mismatch_mean_abs < 0.5 * free.mismatch_mean_abs
    assert replayed.mismatch_kl_k3 < free.mismatch_kl_k3


def test_train_step_with_replay_updates_the_router(engine_samples) -> None:
    trainer = drifted_trainer(True, 1e-2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    m = trainer.train_step(engine_samples)
    assert m.routing_disagreement == 0.0
    gates = [n for n in before if n.endswith("mlp.gate.weight")]
    assert gates and all(not torch.equal(before[n], dict(trainer.model.named_parameters())[n]) for n in gates)


def test_replay_holds_through_activation_checkpointing(engine_samples) -> None:
    """Checkpointed layers re-run their routers inside backward; the step keeps replay around it."""
    plain = drifted_trainer(True, 1e-2)
    plain.train_step(engine_samples)
    ckpt = drifted_trainer(True, 1e-2)
    ckpt.model.activation_checkpointing_enable()
    m = ckpt.train_step(engine_samples)
    assert m.routing_disagreement == 0.0
    for (name, p), (_, q) in zip(plain.model.named_parameters(), ckpt.model.named_parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=1e-6, msg=name)
