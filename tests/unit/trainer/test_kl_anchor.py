"""The KL anchor to the starting policy (trainer.kl_coef): measured from zero, it holds the policy
closer to where it started, and a resumed run anchors to the run's start, not to the checkpoint."""

from __future__ import annotations

import pytest
import torch

from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.trainer import Trainer

from .conftest import build
from .test_trainer import synthetic_samples


def _train(kl_coef: float, steps: int = 4) -> list[float]:
    trainer = Trainer(build("dense-1m"), TrainerConfig(lr=3e-3, kl_coef=kl_coef, seed=1))
    samples = synthetic_samples(6, seed=7)
    kls = [trainer.train_step(samples).kl_ref for _ in range(steps)]
    return [*kls, trainer.measure(samples).kl_ref]


def test_the_anchor_starts_at_zero_and_holds_the_policy_closer():
    free = _train(1e-9)  # practically no anchor, but the same KL figure is measured
    anchored = _train(10.0)
    assert free[0] == 0.0 and anchored[0] == 0.0  # the first step scores the starting weights
    assert free[-1] > 0.0
    assert anchored[-1] < 0.7 * free[-1], (anchored, free)


def test_no_anchor_no_copy_and_no_figure():
    trainer = Trainer(build("dense-1m"), TrainerConfig(lr=1e-3))
    assert trainer.reference is None
    assert trainer.train_step(synthetic_samples(3, seed=2)).kl_ref is None


def test_a_resumed_run_anchors_to_the_runs_start(tmp_path):
    cfg = TrainerConfig(lr=3e-3, kl_coef=0.5, seed=1)
    first = Trainer(build("dense-1m"), cfg)
    start = {k: v.clone() for k, v in first.model.state_dict().items()}
    first.train_step(synthetic_samples(4, seed=3))
    path = first.save(tmp_path / "ckpt")
    # Whatever weights the resuming trainer is built from, the reference comes from the checkpoint.
    resumed = Trainer(build("dense-1m", seed=5), cfg).load(path)
    ref = resumed.reference.state_dict()
    assert all(torch.equal(ref[k], start[k]) for k in start)
    moved = resumed.model.state_dict()
    assert any(not torch.equal(moved[k], start[k]) for k in start)


def test_the_anchor_is_refused_with_data_parallel():
    with pytest.raises(ValueError, match="kl_coef needs data_parallel = 1"):
        TrainerConfig(kl_coef=0.1, data_parallel=2)
