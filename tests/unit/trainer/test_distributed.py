"""Data-parallel training (trainer.data_parallel = 2, gloo on CPU, FSDP2) against one process, exact
resume with two ranks, and the precision / activation-checkpointing options.

The two-rank trainers are the real thing: `DistributedTrainer` makes this process rank 0 and spawns
rank 1, which meet on a loopback port; every assertion reads what rank 0 reports or gathers.
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from inhabit.placement.trainer_dist import DistributedTrainer
from inhabit.trainer.checkpoint import checkpoint_name
from inhabit.trainer.config import TrainerConfig, TrainerRunSettings
from inhabit.trainer.distributed import balance
from inhabit.trainer.trainer import Trainer

from .test_trainer import synthetic_samples

ROUTES = (2, 2, 8)  # moe-2m: layers, k, experts


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Model folders (weights + tokenizer) of the tiny dense and MoE presets."""
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    root = tmp_path_factory.mktemp("models")
    return {
        p: save_model_folder(build_tiny_model(p, vocab_size=len(tok), seed=0), tok, root / p)
        for p in ("dense-1m", "moe-2m")
    }


def batches(moe: bool, n: int = 3) -> list[list]:
    # 7 samples of 3 lengths over 2 ranks: uneven shares, and (with the small micro-batch budget
    # below) a rank with fewer micro-batches than the other, which pads with an empty forward.
    return [synthetic_samples(7, seed=100 + s, routes_shape=ROUTES if moe else None) for s in range(n)]


def two_ranks(folder, cfg: TrainerConfig, checkpoint=None) -> DistributedTrainer:
    return DistributedTrainer(
        folder,
        TrainerRunSettings(trainer=cfg.model_copy(update={"data_parallel": 2}), threads=1),
        checkpoint=checkpoint,
    )


def test_balance_splits_samples_by_token_count() -> None:
    samples = synthetic_samples(7, seed=0, lengths=(40, 5, 5, 12, 30, 9, 22))
    parts = balance(samples, 2)
    assert sorted(i for p in parts for i in p) == list(range(7)), "every sample on exactly one rank"
    loads = [sum(samples[i].num_tokens for i in p) for p in parts]
    assert abs(loads[0] - loads[1]) <= max(s.num_tokens for s in samples)
    assert parts == balance(samples, 2), "deterministic"
    assert balance(samples[:1], 2) == [[0], []], "fewer samples than ranks: a rank gets none"


@pytest.mark.slow  # two processes (spawn, imports, gloo per layer): ~20-80 s on a loaded 2-core machine
@pytest.mark.parametrize("preset", ["dense-1m", "moe-2m"])
def test_two_ranks_match_one_process(folders, preset) -> None:
    moe = preset.startswith("moe")
    # lr 1e-4: Adam turns last-bit differences in near-zero gradients (different summation order)
    # into weight differences of about lr / 100 per step; at 1e-3 they approach 1e-5 after 3 steps.
    cfg = TrainerConfig(lr=1e-4, micro_batch_tokens=64, seed=0)
    one = Trainer.from_pretrained(folders[preset], cfg)
    expected = [one.train_step(b) for b in batches(moe)]
    handle = two_ranks(folders[preset], cfg)
    try:
        got = [asyncio.run(handle.step(b)) for b in batches(moe)]
        weights = handle.state_dict_for_engine()
    finally:
        handle.close_sync()
    assert handle.version == one.version == 3
    for e, g in zip(expected, got, strict=True):
        assert g["loss"] == pytest.approx(e.loss, abs=1e-5)
        # the gradient is the whole batch's, summed over ranks (not averaged, not one rank's)
        assert g["grad_norm"] == pytest.approx(e.grad_norm, rel=1e-3)
        assert (g["samples"], g["tokens"], g["loss_tokens"]) == (e.samples, e.tokens, e.loss_tokens)
        assert g["entropy"] == pytest.approx(e.entropy, rel=1e-5)
        assert g["mismatch_mean_abs"] == pytest.approx(e.mismatch_mean_abs, rel=1e-5)
        if moe:
            assert e.routing_disagreement == g["routing_disagreement"] == 0.0, "router replay on every rank"
    reference = one.state_dict_for_engine()
    assert set(weights) == set(reference)
    start = Trainer.from_pretrained(folders[preset], cfg).state_dict_for_engine()
    assert any(not torch.equal(weights[k], start[k]) for k in weights), "the ranks trained"
    for name, w in weights.items():
        assert torch.allclose(w, reference[name], rtol=0, atol=1e-5), f"{name} differs"


@pytest.mark.slow
def test_resume_with_two_ranks_is_exact(folders, tmp_path) -> None:
    cfg = TrainerConfig(
        lr=1e-3, schedule="cosine", warmup_steps=1, total_steps=4, micro_batch_tokens=64, seed=3
    )
    data = batches(moe=False, n=3)
    straight = two_ranks(folders["dense-1m"], cfg)
    try:
        asyncio.run(straight.step(data[0]))
        straight.set_data_state({"cursor": 1})
        saved = straight.state_dict_for_engine()
        ckpt = straight.save(tmp_path / checkpoint_name(straight.version))
        for b in data[1:]:
            asyncio.run(straight.step(b))
        expected = straight.state_dict_for_engine()
    finally:
        straight.close_sync()

    # The checkpoint is one servable folder: a single process loads the gathered weights.
    single = Trainer.from_pretrained(ckpt, cfg).load(ckpt)
    assert single.version == 1 and single.data_state["cursor"] == 1
    assert all(torch.equal(single.state_dict_for_engine()[k], v) for k, v in saved.items())

    resumed = two_ranks(folders["dense-1m"], cfg, checkpoint=ckpt)
    try:
        assert resumed.version == 1 and resumed.trainer.data_state["cursor"] == 1
        for b in data[1:]:
            asyncio.run(resumed.step(b))
        got = resumed.state_dict_for_engine()
    finally:
        resumed.close_sync()
    for name, w in expected.items():
        assert torch.equal(got[name], w), f"{name} differs after resume"


def test_bf16_mixed_stays_close_to_fp32(folders) -> None:
    """bf16 autocast over fp32 weights: losses within 1e-3 of fp32 over 3 steps (measured: 4e-5)."""
    losses = {}
    for precision in ("fp32", "bf16-mixed"):
        t = Trainer.from_pretrained(folders["dense-1m"], TrainerConfig(lr=1e-3, precision=precision))
        losses[precision] = [t.train_step(b).loss for b in batches(moe=False)]
        assert all(p.dtype == torch.float32 for p in t.model.parameters()), "master weights stay fp32"
    for a, b in zip(losses["fp32"], losses["bf16-mixed"], strict=True):
        assert b == pytest.approx(a, abs=1e-3)
    assert losses["fp32"] != losses["bf16-mixed"], "bf16 compute really ran"


def test_activation_checkpointing_gives_the_same_step(folders) -> None:
    out = {}
    for ckpt in (False, True):
        t = Trainer.from_pretrained(folders["moe-2m"], TrainerConfig(lr=1e-3, activation_checkpointing=ckpt))
        m = [t.train_step(b) for b in batches(moe=True, n=2)]
        out[ckpt] = (m, t.state_dict_for_engine())
    for a, b in zip(out[False][0], out[True][0], strict=True):
        assert b.loss == pytest.approx(a.loss, abs=1e-6) and b.routing_disagreement == 0.0
    for name, w in out[False][1].items():
        assert torch.allclose(out[True][1][name], w, atol=1e-6), name


@pytest.mark.gpu
def test_two_ranks_on_cuda_match_one_process(folders) -> None:
    """The NCCL path: two GPUs, one rank each (NCCL cannot put two ranks on one GPU)."""
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA GPUs")
    cfg = TrainerConfig(lr=1e-4, micro_batch_tokens=64, device="cuda")
    one = Trainer.from_pretrained(folders["moe-2m"], cfg)
    expected = [one.train_step(b).loss for b in batches(moe=True)]
    reference = one.state_dict_for_engine()
    handle = two_ranks(folders["moe-2m"], cfg)
    try:
        got = [asyncio.run(handle.step(b))["loss"] for b in batches(moe=True)]
        weights = handle.state_dict_for_engine()
    finally:
        handle.close_sync()
    assert got == pytest.approx(expected, abs=1e-4)
    for name, w in weights.items():
        assert torch.allclose(w, reference[name], atol=1e-4), name


@pytest.mark.gpu
def test_bf16_mixed_on_cuda_stays_close_to_fp32(folders) -> None:
    losses = {}
    for precision in ("fp32", "bf16-mixed"):
        cfg = TrainerConfig(lr=1e-3, precision=precision, device="cuda")
        t = Trainer.from_pretrained(folders["dense-1m"], cfg)
        losses[precision] = [t.train_step(b).loss for b in batches(moe=False)]
    assert losses["bf16-mixed"] == pytest.approx(losses["fp32"], abs=1e-3)
