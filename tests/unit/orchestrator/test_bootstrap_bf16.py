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


def test_micro_batches_and_the_supervised_head_give_the_whole_batch_update():
    """Rows in groups of at most `micro_batch_tokens` padded tokens, gradients accumulated, and the
    vocabulary projection on the supervised positions only: the same loss and gradients as one forward of the whole batch with every position's logits (the formula below)."""
    gen = random.Random(5)
    examples = []
    for n in (30, 45, 12, 60):
        mask = [gen.random() < 0.4 for _ in range(n)]
        examples.append(([gen.randrange(VOCAB) for _ in range(n)], mask))

    def reference_step(model: torch.nn.Module, opt: torch.optim.Optimizer, batch) -> float:
        n = max(len(ids) for ids, _ in batch)
        inp = torch.zeros((len(batch), n), dtype=torch.long)
        tgt = torch.full((len(batch), n), -100, dtype=torch.long)
        att = torch.zeros((len(batch), n), dtype=torch.long)
        for r, (ids, mask) in enumerate(batch):
            inp[r, : len(ids)], att[r, : len(ids)] = torch.tensor(ids), 1
            labels = torch.tensor([i if m else -100 for i, m in zip(ids, mask, strict=True)])
            tgt[r, : len(ids) - 1] = labels[1:]
        logits = model(input_ids=inp, attention_mask=att).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), tgt.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss.item()

    ref = build_tiny_model(SPEC, vocab_size=VOCAB, seed=0)
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.01, betas=(0.9, 0.98))
    for g in opt.param_groups:
        g["lr"] = 1e-2  # warmup=1, steps=1: the first step runs at the peak rate
    ref_loss = reference_step(ref, opt, examples)
    for limit in (None, 64, 100):
        model = build_tiny_model(SPEC, vocab_size=VOCAB, seed=0)
        losses = train_bootstrap(
            model, examples, steps=1, batch_size=4, lr=1e-2, warmup=1, seed=0, micro_batch_tokens=limit
        )
        assert abs(losses[0] - ref_loss) < 1e-5, limit
        # the (clipped) gradients the update was made from; Adam's first step divides each by
        # its own magnitude, so the weights would amplify float noise of near-zero gradients
        for a, b in zip(model.parameters(), ref.parameters(), strict=True):
            assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-7), limit
