"""The online update: policy gradient from single episodes, a baseline, IS weights, a KL anchor.

Online there are no groups (each session is one episode of its own task), so the advantage of a
session is its reward minus a baseline: an exponential moving average of rewards over past cycles
(`baseline_decay`), or, in the first cycle, the leave-one-out mean of the other sessions of the
batch. The baseline never includes the session it is subtracted from, so it does not bias the
gradient.

The loss is the trainer's own (`inhabit.trainer.losses.policy_loss`): per token
-w * min(r A, clip(r) A), where the proximal policy pi_old is the DEPLOYED version (the weights
this update starts from, scored once without gradient), and w = min(pi_old / mu, tis_cap) is the
truncated importance weight against the engine's logged logprobs mu (sessions may come from
versions up to `max_lag` behind, and the engine's numbers differ from the trainer's). Added to it:
`kl_coef` times the k3 estimate of KL(pi_theta || pi_deployed) over the generated tokens,
exp(d) - d - 1 with d = log pi_deployed - log pi_theta, which anchors the candidate near the
version users are running. With `updates` > 1 the same batch is used for several optimizer
updates; the clip and the anchor then bind.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from inhabit.errors import TrainerError
from inhabit.online.config import OnlineTrainConfig
from inhabit.trainer.losses import LossStats, k3, policy_loss
from inhabit.trainer.samples import Sample, trajectory_samples
from inhabit.types import Trajectory


@dataclass(frozen=True)
class Episode:
    """One rated session, ready for training."""

    session_id: str
    trajectory: Trajectory
    reward: float


def advantages(rewards: Sequence[float], baseline: float | None) -> list[float]:
    """reward - baseline; without a baseline yet, reward - the mean of the OTHER rewards (0 if alone)."""
    if baseline is not None:
        return [r - baseline for r in rewards]
    n, total = len(rewards), sum(rewards)
    return [r - (total - r) / (n - 1) if n > 1 else 0.0 for r in rewards]


def next_baseline(baseline: float | None, rewards: Sequence[float], decay: float) -> float | None:
    if not rewards:
        return baseline
    mean = sum(rewards) / len(rewards)
    return mean if baseline is None else decay * baseline + (1 - decay) * mean


def episode_samples(episodes: Sequence[Episode], baseline: float | None) -> list[Sample]:
    """Every episode's samples with its advantage (episodes whose advantage is 0 carry no gradient)."""
    out: list[Sample] = []
    for ep, adv in zip(episodes, advantages([e.reward for e in episodes], baseline), strict=True):
        if adv != 0.0:
            traj = ep.trajectory.model_copy(update={"reward": ep.reward})
            out += trajectory_samples(traj, adv, group_id=ep.session_id)
    return out


def online_update(trainer: Any, samples: Sequence[Sample], config: OnlineTrainConfig) -> dict[str, float]:
    """`config.updates` optimizer updates of `trainer` on `samples`; returns the figures to record.

    Uses the trainer's micro-batching and forward (the same scoring as `Trainer.train_step`), so a
    MoE model replays the engine's routes here too. The caller sets the new version afterwards.
    """
    t0 = time.perf_counter()
    samples = [s for s in samples if s.num_loss_tokens > 0]
    if not samples:
        raise TrainerError("no sample with a generated token; skip the update")
    micro = trainer._micro(samples)
    n_tok = sum(s.num_loss_tokens for s in samples)
    reference = []
    for mb in micro:  # the deployed policy: proximal policy and KL anchor, scored once
        with trainer._routing(mb, None):
            reference.append(trainer._forward(mb, None, grad=False))
    stats, losses, kls, norms = LossStats(), [], [], []
    loss_cfg = trainer.config.loss
    for _ in range(config.updates):
        trainer.optimizer.zero_grad(set_to_none=True)
        total_pg = total_kl = 0.0
        stats = LossStats()  # the figures of the last update are the ones recorded
        for mb, ref in zip(micro, reference, strict=True):
            with trainer._routing(mb, None), torch.enable_grad():
                lp = trainer._forward(mb, None, grad=True)
                pg, st = policy_loss(
                    lp,
                    ref,
                    mb.behaviour_logprobs,
                    mb.advantages,
                    mb.loss_mask,
                    loss_cfg,
                    num_tokens=n_tok,
                    num_sequences=len(samples),
                )
                kl = k3(lp, ref, mb.loss_mask) / n_tok
                (pg + config.kl_coef * kl).backward()
            total_pg += float(pg.detach())
            total_kl += float(kl.detach())
            stats = stats.merge(st)
        limit = trainer.config.grad_clip if trainer.config.grad_clip is not None else float("inf")
        params = [p for p in trainer.model.parameters() if p.grad is not None]
        norms.append(float(torch.nn.utils.clip_grad_norm_(params, limit)))
        trainer.optimizer.step()
        trainer.scheduler.step()
        losses.append(total_pg)
        kls.append(total_kl)
    trainer.optimizer.zero_grad(set_to_none=True)
    trainer.steps += 1
    summary = stats.summary()
    return {
        "samples": len(samples),
        "loss_tokens": n_tok,
        "loss": losses[-1],
        "kl": kls[-1],
        "grad_norm": max(norms),
        "advantage_mean": sum(s.advantage for s in samples) / len(samples),
        "ratio_mean": summary["ratio_mean"],
        "truncated_fraction": summary["truncated_fraction"],
        "clip_fraction": summary["clip_fraction"],
        "seconds": time.perf_counter() - t0,
    }
