"""The online update: advantages against a baseline, the k3 anchor, and an update that moves the
policy toward rewarded episodes and away from punished ones."""

from __future__ import annotations

import pytest
import torch

from inhabit.online.config import OnlineTrainConfig
from inhabit.online.train import Episode, advantages, episode_samples, k3, next_baseline, online_update
from inhabit.types import Trajectory

from .conftest import synthetic_trajectory


def test_advantages_leave_one_out_then_baseline() -> None:
    assert advantages([1.0, 0.0, -1.0], None) == [1.5, 0.0, -1.5]
    assert advantages([1.0], None) == [0.0]
    assert advantages([1.0, -1.0], 0.25) == [0.75, -1.25]
    assert next_baseline(None, [1.0, 0.0], 0.9) == 0.5
    assert next_baseline(0.5, [1.0], 0.9) == pytest.approx(0.55)


def test_k3_is_zero_at_the_reference_and_positive_away_from_it() -> None:
    ref = torch.tensor([[-1.0, -2.0, -0.5]])
    mask = torch.tensor([[False, True, True]])
    assert float(k3(ref, ref, mask)) == 0.0
    assert float(k3(ref + 0.3, ref, mask)) > 0.0
    assert float(k3(torch.zeros_like(ref), ref, torch.zeros_like(mask))) == 0.0


def _sequence_logprob(model, sample) -> float:
    ids = sample.input_ids[None]
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    tok = logp.gather(1, ids[0, 1:, None]).squeeze(1)
    return float(tok[sample.loss_mask[1:]].sum())


def test_the_update_raises_the_rewarded_episode_and_lowers_the_punished_one(tiny_folder) -> None:
    from inhabit.trainer.trainer import Trainer

    cfg = OnlineTrainConfig.model_validate({"trainer": {"lr": 3e-3}, "updates": 3, "kl_coef": 0.01})
    trainer = Trainer.from_pretrained(tiny_folder, cfg.trainer)
    good = Episode("a", Trajectory.model_validate(synthetic_trajectory(1)), 1.0)
    bad = Episode("b", Trajectory.model_validate(synthetic_trajectory(2)), -1.0)
    samples = episode_samples([good, bad], baseline=None)
    assert [s.advantage for s in samples] == [2.0, -2.0]
    before = [_sequence_logprob(trainer.model, s) for s in samples]
    figures = online_update(trainer, samples, cfg)
    after = [_sequence_logprob(trainer.model, s) for s in samples]
    assert after[0] > before[0] and after[1] < before[1]
    assert figures["samples"] == 2 and figures["kl"] > 0.0
    # Logged logprobs (-20) are far below the trainer's: every IS weight is truncated at tis_cap.
    assert figures["truncated_fraction"] == 1.0
