"""trainer.deterministic: the trainer recomputes a deterministic engine's logprobs bit for bit.

Completions come from a real `EmbeddedEngine` with `engine.deterministic` (tiny dense and MoE
models, fp32 and bf16), sampled many at a time so that batching could differ; the trainer then
scores all of them in its own micro-batches. Mismatch must be exactly 0 and every importance ratio
exactly 1, and MoE routes must agree without router replay.
"""

from __future__ import annotations

import asyncio
import random

import pytest
import torch

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.samples import group_samples
from inhabit.trainer.trainer import Trainer

from .conftest import VOCAB, build, completion_trajectory


def engine_completions(model, dtype: str, n: int, seed: int):
    """`n` seeded completions of random prompts, all submitted at once (the engine batches them)."""
    rng = random.Random(seed)
    reqs = [
        GenerationRequest(
            [rng.randrange(VOCAB) for _ in range(rng.randrange(2, 24))],
            SamplingParams(temperature=1.0, max_tokens=rng.randrange(1, 8), seed=seed * 1000 + i),
        )
        for i in range(n)
    ]
    config = EngineConfig(deterministic=True, dtype=dtype, stop_at_eos=False, prefill_token_budget=256)

    async def run():
        engine = EmbeddedEngine(model, None, config)
        try:
            return await engine.generate(reqs)
        finally:
            await engine.close()

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("preset", "dtype", "n"),
    [
        ("dense-1m", "float32", 240),
        ("moe-2m", "float32", 64),
        ("dense-1m", "bfloat16", 24),
        ("moe-2m", "bfloat16", 24),
    ],
)
def test_trainer_recomputes_engine_logprobs_bitwise(preset: str, dtype: str, n: int) -> None:
    comps = engine_completions(build(preset), dtype, n, seed=3)
    samples = group_samples([completion_trajectory(c, float(i % 2)) for i, c in enumerate(comps)])
    assert sum(s.num_loss_tokens for s in samples) == sum(len(c.token_ids) for c in comps)
    config = TrainerConfig(
        deterministic=True, deterministic_dtype=dtype, router_replay=False, micro_batch_tokens=512
    )
    trainer = Trainer(build(preset), config)  # the same weights, fp32 in the trainer
    m = trainer.measure(samples)
    assert m.mismatch_max_abs == 0.0 and m.mismatch_mean_abs == 0.0
    assert m.ratio_min == 1.0 and m.ratio_max == 1.0
    if preset.startswith("moe"):
        assert m.routing_disagreement == 0.0
    # The standard path (the default) does not agree bitwise: the invariant kernels are what did it.
    if dtype == "bfloat16":
        plain = Trainer(build(preset), TrainerConfig(router_replay=False, micro_batch_tokens=512)).measure(
            samples
        )
        assert plain.mismatch_max_abs > 0.0


def test_deterministic_train_step_has_the_standard_gradient() -> None:
    comps = engine_completions(build("moe-2m"), "float32", 8, seed=5)
    samples = group_samples([completion_trajectory(c, float(i % 3)) for i, c in enumerate(comps)])
    det = Trainer(build("moe-2m"), TrainerConfig(lr=1e-3, deterministic=True, router_replay=False))
    std = Trainer(build("moe-2m"), TrainerConfig(lr=1e-3))
    md, ms = det.train_step(samples), std.train_step(samples)
    assert md.ratio_min == md.ratio_max == 1.0 and md.mismatch_max_abs == 0.0
    assert md.loss == pytest.approx(ms.loss, rel=1e-4, abs=1e-6)
    assert md.grad_norm == pytest.approx(ms.grad_norm, rel=1e-3)
    a, b = det.state_dict_for_engine(), std.state_dict_for_engine()
    # Adam moves each weight by about lr; the two differ only by rounding-level ratio differences.
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 0.1 * 1e-3
    before = build("moe-2m").state_dict()
    assert any(not torch.equal(a[k], before[k]) for k in a), "the step moved the weights"


def test_deterministic_trainer_refuses_unsupported_setups() -> None:
    from inhabit.errors import TrainerError

    with pytest.raises(TrainerError, match="CPU only"):
        Trainer(build("dense-1m"), TrainerConfig(deterministic=True, device="meta"))
