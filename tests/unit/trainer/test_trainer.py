"""The train step on a tiny model: versions, weights for the engine, metrics, accumulation, PPO updates."""

from __future__ import annotations

import math

import pytest
import torch

from inhabit.errors import ConfigError, TrainerError
from inhabit.trainer.batching import collate
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.losses import LossConfig
from inhabit.trainer.samples import Sample
from inhabit.trainer.trainer import Trainer

from .conftest import VOCAB, build


def synthetic_samples(n: int, seed: int, *, lengths=(12, 20, 31), routes_shape=None) -> list[Sample]:
    """Random prompts + completions with made-up engine logprobs and advantages."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        length = lengths[i % len(lengths)]
        mask = torch.zeros(length, dtype=torch.bool)
        mask[length // 2 :] = True
        routes = None
        if routes_shape is not None:
            layers, _k, experts = routes_shape  # k = 2: expert e and e + 1
            first = torch.randint(0, experts, (length, layers, 1), generator=g)
            routes = torch.cat([first, (first + 1) % experts], -1)
        out.append(
            Sample(
                input_ids=torch.randint(10, VOCAB, (length,), generator=g),
                loss_mask=mask,
                behaviour_logprobs=torch.where(mask, -6.2 + 0.1 * torch.randn(length, generator=g), 0.0),
                versions=torch.where(mask, 0, -1),
                advantage=float(torch.randn((), generator=g)),
                routed_experts=routes,
            )
        )
    return out


def on_policy(trainer: Trainer, samples: list[Sample]) -> list[Sample]:
    """The same samples with behaviour logprobs the trainer itself computes (a perfect engine)."""
    out = []
    for s in samples:
        mb = collate([s])
        lp = trainer._score(mb, None)
        out.append(Sample(**{**s.__dict__, "behaviour_logprobs": lp[0].float()}))
    return out


def test_train_step_advances_the_version_and_changes_the_weights(dense) -> None:
    trainer = Trainer(dense, TrainerConfig(lr=1e-3))
    before = trainer.state_dict_for_engine()
    metrics = trainer.train_step(synthetic_samples(6, seed=0))
    after = trainer.state_dict_for_engine()
    assert trainer.version == metrics.version == 1 and trainer.steps == 1
    assert set(before) == set(dense.state_dict())
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert before["model.embed_tokens.weight"].data_ptr() != dense.model.embed_tokens.weight.data_ptr(), (
        "a copy"
    )
    assert metrics.samples == 6 and metrics.updates == 1 and metrics.loss_tokens > 0
    assert metrics.grad_norm > 0 and metrics.lr == pytest.approx(1e-3)
    assert metrics.routing_disagreement is None, "dense model: no routing"
    assert 0 < metrics.entropy <= torch.log(torch.tensor(float(VOCAB))) + 1e-4


def test_on_policy_samples_show_no_mismatch_and_unit_ratios(dense) -> None:
    trainer = Trainer(dense, TrainerConfig())
    samples = on_policy(trainer, synthetic_samples(5, seed=1))
    m = trainer.measure(samples)
    assert m.mismatch_mean_abs < 1e-5 and m.mismatch_kl_k3 < 1e-9
    assert m.ratio_min == pytest.approx(1.0, abs=1e-4) and m.ratio_max == pytest.approx(1.0, abs=1e-4)
    assert m.fresh_tokens == m.loss_tokens and m.staleness_max == 0
    # stale, mismatched engine numbers show up in the figures
    off = [
        Sample(**{**s.__dict__, "behaviour_logprobs": s.behaviour_logprobs - 0.5 * s.loss_mask})
        for s in samples
    ]
    m2 = trainer.measure(off)
    assert m2.mismatch_mean_abs == pytest.approx(0.5, abs=1e-4)
    assert m2.mismatch_kl_k3 == pytest.approx(math.exp(0.5) - 1 - 0.5, abs=1e-4)  # k3 = r - 1 - log r
    assert m2.ratio_mean == pytest.approx(float(torch.exp(torch.tensor(0.5))), rel=1e-3)
    assert m2.truncated_fraction == 0.0  # e^0.5 = 1.65 < tis_cap 2
    assert trainer.version == 0, "measure does not update"


def test_staleness_is_measured_against_the_trainer_version(dense) -> None:
    trainer = Trainer(dense, TrainerConfig(), version=5)
    samples = [
        Sample(**{**s.__dict__, "versions": torch.where(s.loss_mask, 3, -1)}) for s in synthetic_samples(3, 2)
    ]
    m = trainer.measure(samples)
    assert m.staleness_mean == 2.0 and m.staleness_max == 2 and m.fresh_tokens == 0


def test_micro_batching_gives_the_same_update_as_one_big_batch() -> None:
    samples = synthetic_samples(7, seed=3)
    results = []
    for budget in (4096, 40):
        # adam_eps 1 makes the first update ~ lr * grad (Adam's sign-like update would turn the
        # rounding of near-zero gradients into lr-sized differences), so weights compare gradients.
        cfg = TrainerConfig(lr=0.1, adam_eps=1.0, micro_batch_tokens=budget)
        trainer = Trainer(build("dense-1m"), cfg)
        m = trainer.train_step(samples)
        results.append((m, trainer.state_dict_for_engine()))
    (m_big, w_big), (m_small, w_small) = results
    assert m_big.micro_batches == 1 and m_small.micro_batches > 3
    assert m_small.loss == pytest.approx(m_big.loss, rel=1e-4, abs=1e-6)
    assert m_small.grad_norm == pytest.approx(m_big.grad_norm, rel=1e-4)
    for k in w_big:
        # Adam divides by sqrt(v): near-zero gradients amplify rounding, so allow 1% of one step (lr).
        torch.testing.assert_close(w_small[k], w_big[k], rtol=0, atol=1e-5)


def test_several_updates_per_step_make_the_ppo_clip_bind(dense) -> None:
    cfg = TrainerConfig(lr=3e-2, updates_per_step=4, loss=LossConfig(eps_low=0.01, eps_high=0.01))
    trainer = Trainer(dense, cfg)
    samples = on_policy(trainer, synthetic_samples(8, seed=4))
    m = trainer.train_step(samples)
    assert m.updates == 4 and trainer.version == 1, "one policy version per train_step"
    assert m.clip_fraction > 0.0
    assert trainer.scheduler.last_epoch == 4


def test_epochs_pass_over_the_batch_again_against_one_proximal_policy(dense) -> None:
    cfg = TrainerConfig(lr=3e-2, updates_per_step=2, epochs=3, loss=LossConfig(eps_low=0.01, eps_high=0.01))
    trainer = Trainer(dense, cfg)
    samples = on_policy(trainer, synthetic_samples(8, seed=4))
    m = trainer.train_step(samples)
    assert m.updates == 6 and trainer.version == 1, "epochs x mini-batches updates, one version"
    assert trainer.scheduler.last_epoch == 6
    assert m.clip_fraction > 0.0, "later passes are measured against the first pass's proximal policy"


def test_sequence_variant_trains(dense) -> None:
    trainer = Trainer(
        dense, TrainerConfig(lr=1e-3, loss=LossConfig(variant="sequence", eps_low=3e-4, eps_high=4e-4))
    )
    m = trainer.train_step(synthetic_samples(4, seed=5))
    assert m.grad_norm > 0 and trainer.version == 1


def test_empty_batches_and_bad_routes_are_typed_errors(dense, moe) -> None:
    trainer = Trainer(dense, TrainerConfig())
    no_loss = [
        Sample(**{**s.__dict__, "loss_mask": torch.zeros_like(s.loss_mask)}) for s in synthetic_samples(2, 6)
    ]
    with pytest.raises(TrainerError, match="no sample with a generated token"):
        trainer.train_step(no_loss)
    moe_trainer = Trainer(moe, TrainerConfig())
    with pytest.raises(TrainerError, match="routed experts do not fit"):
        moe_trainer.measure(synthetic_samples(2, 7, routes_shape=(3, 2, 8)))  # 3 layers, model has 2


def test_config_bounds_and_schedules() -> None:
    from inhabit.config import load_config
    from inhabit.trainer.optim import lr_factor

    with pytest.raises(ConfigError, match="total_steps"):
        load_config(TrainerConfig, None, ["schedule=cosine"])
    with pytest.raises(ConfigError, match="lr"):
        load_config(TrainerConfig, None, ["lr=-1"])
    with pytest.raises(ConfigError, match="epochs"):
        load_config(TrainerConfig, None, ["epochs=0"])
    cfg = load_config(
        TrainerConfig, None, ["loss.variant=sequence", "schedule=linear", "total_steps=10", "warmup_steps=2"]
    )
    assert cfg.loss.variant == "sequence"
    assert [round(lr_factor(u, cfg), 4) for u in (0, 1, 2, 6, 10, 50)] == [0.5, 1.0, 1.0, 0.5, 0.0, 0.0]
    cos = TrainerConfig(schedule="cosine", total_steps=4, min_lr_ratio=0.1)
    assert lr_factor(0, cos) == pytest.approx(1.0) and lr_factor(2, cos) == pytest.approx(0.55)


def test_max_staleness_drops_old_samples_at_the_optimizer(dense) -> None:
    trainer = Trainer(dense, TrainerConfig(lr=1e-3), version=5)
    base = synthetic_samples(3, 8)
    samples = [
        Sample(**{**s.__dict__, "versions": torch.where(s.loss_mask, v, -1)})
        for s, v in zip(base, (2, 4, 5), strict=True)
    ]
    m = trainer.train_step(samples, max_staleness=1)
    assert m.stale_dropped == 1 and m.samples == 2 and m.staleness_max == 1
    with pytest.raises(TrainerError, match="dropped as too stale"):
        trainer.train_step(samples[:1], max_staleness=1)
    assert trainer.version == 6, "a refused step does not advance the version"
