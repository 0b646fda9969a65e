"""The bootstrap's bf16 path (`train_bootstrap(bf16=True)`, the trainer's `precision = "bf16-mixed"`):
the forward's matmuls really run in bf16, the weights and optimizer stay fp32, and the steps still
learn."""

from __future__ import annotations

import random

import pytest
import torch

from inhabit.models.tiny import TinyModelSpec, build_tiny_model
from inhabit.orchestrator.quickstart.bootstrap import train_bootstrap

SPEC = TinyModelSpec(hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=128)
VOCAB = 256
STEPS = 12


def _run(bf16: bool) -> tuple[torch.nn.Module, list[float], set[torch.dtype]]:
    """Train a fresh tiny model on one repeated example; the dtypes its projections output."""
    model = build_tiny_model(SPEC, vocab_size=VOCAB, seed=0)
    gen = random.Random(3)
    example = ([gen.randrange(VOCAB) for _ in range(40)], [True] * 40)
    seen: set[torch.dtype] = set()
    layer = model.model.layers[0]
    hooks = [
        m.register_forward_hook(lambda _m, _inp, out: seen.add(out.dtype))
        for m in (layer.self_attn.q_proj, layer.mlp.down_proj, model.lm_head)
    ]
    try:
        losses = train_bootstrap(
            model, [example] * 2, steps=STEPS, batch_size=2, lr=1e-2, warmup=2, seed=0, bf16=bf16
        )
    finally:
        for h in hooks:
            h.remove()
    return model, losses, seen


@pytest.fixture(scope="module")
def bf16_run():
    return _run(bf16=True)


def test_bf16_bootstrap_runs_the_forward_in_bf16_keeps_fp32_weights_and_learns(bf16_run):
    model, losses, seen = bf16_run
    assert seen == {torch.bfloat16}  # every projection of every step computed in bf16
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
    assert len(losses) == STEPS and all(map(torch.isfinite, torch.tensor(losses)))
    # one example repeated: the steps memorize part of it (an untrained model is at ln 256 = 5.5)
    assert losses[-1] < losses[0] - 1.5


def test_without_the_flag_the_same_steps_stay_in_fp32(bf16_run):
    _, fp32_losses, seen = _run(bf16=False)
    assert seen == {torch.float32}
    _, bf16_losses, _ = bf16_run
    # same start, same batches: the first losses agree to bf16 precision, but are not the same numbers
    assert abs(bf16_losses[0] - fp32_losses[0]) < 0.05
    assert bf16_losses[0] != fp32_losses[0]
