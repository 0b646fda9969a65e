"""What one train step reports (`StepMetrics`), and the engine-vs-trainer mismatch accumulator.

Mismatch is measured on every generated token with the logprobs the trainer computes BEFORE it
updates (the weights of `version`), against the engine's (behaviour) logprobs:

* `mismatch_mean_abs` / `mismatch_max_abs`: |log pi_trainer - log pi_engine|;
* `mismatch_kl_k3`: the k3 estimator of KL(pi_engine || pi_trainer) from tokens sampled by the
  engine, mean of (r - 1) - log r with r = pi_trainer / pi_engine (unbiased, never negative);
* `fresh_*`: the same over tokens the engine generated with the very weights the trainer holds
  (version == trainer version); on them any difference is numerical (batching, KV cache, dtype,
  routing) rather than staleness;
* `routing_disagreement` (MoE, when samples carry routes): the fraction of positions with recorded
  routes where some layer's set of experts in the trainer's forward differs from the engine's.
  With router replay on it is measured too, and must be 0.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class StepMetrics:
    """One train step (or one `measure` call, with update fields at 0)."""

    version: int
    """Policy version after the step (the one `state_dict_for_engine` now returns)."""
    loss: float
    grad_norm: float
    lr: float
    samples: int
    micro_batches: int
    updates: int
    tokens: int
    """Tokens forwarded (prompts included, padding not)."""
    loss_tokens: int
    reward_mean: float
    advantage_mean: float
    advantage_abs_mean: float
    entropy: float
    """Mean entropy (nats) of the trainer's tempered next-token distribution at generated tokens."""
    ratio_mean: float
    ratio_min: float
    ratio_max: float
    truncated_fraction: float
    masked_fraction: float
    clip_fraction: float
    mismatch_mean_abs: float
    mismatch_max_abs: float
    mismatch_kl_k3: float
    fresh_tokens: int
    fresh_mismatch_mean_abs: float | None
    staleness_mean: float
    staleness_max: int
    """Policy versions between the trainer and the tokens it trained on (after any drop)."""
    routing_disagreement: float | None
    step_s: float
    tokens_per_s: float
    stale_dropped: int = 0
    """Samples left out by `train_step(max_staleness=...)`."""
    kl_ref: float | None = None
    """Mean k3 KL(policy || starting policy) per generated token, with trainer.kl_coef > 0."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class MismatchAccumulator:
    """Sums over micro-batches of the mismatch, staleness, routing and entropy figures above."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.tokens = 0
        self.abs_sum = 0.0
        self.abs_max = 0.0
        self.k3_sum = 0.0
        self.fresh = 0
        self.fresh_abs_sum = 0.0
        self.stale_sum = 0
        self.stale_max = 0
        self.stale_n = 0
        self.entropy_sum = 0.0
        self.routed = 0
        self.disagree = 0

    @torch.no_grad()
    def add_logprobs(
        self, trainer_lp: torch.Tensor, engine_lp: torch.Tensor, mask: torch.Tensor, versions: torch.Tensor
    ) -> None:
        mask = mask.bool()
        t, e = trainer_lp.detach()[mask].double(), engine_lp[mask].double()
        if t.numel() == 0:
            return
        diff = t - e
        self.tokens += t.numel()
        self.abs_sum += float(diff.abs().sum())
        self.abs_max = max(self.abs_max, float(diff.abs().max()))
        self.k3_sum += float((torch.expm1(diff) - diff).sum())
        v = versions[mask]
        fresh = v == self.version
        self.fresh += int(fresh.sum())
        self.fresh_abs_sum += float(diff[fresh].abs().sum())
        known = v[v >= 0]
        if known.numel():
            lag = (self.version - known).clamp(min=0)
            self.stale_sum += int(lag.sum())
            self.stale_max = max(self.stale_max, int(lag.max()))
            self.stale_n += known.numel()

    def add_entropy(self, entropy_sum: float) -> None:
        self.entropy_sum += entropy_sum

    @torch.no_grad()
    def add_routes(self, got: torch.Tensor, recorded: torch.Tensor) -> None:
        """`got`, `recorded`: [B, T, layers, k]; positions where any recorded id is -1 are not scored."""
        known = (recorded >= 0).all(-1).all(-1)
        differs = (got.sort(-1).values != recorded.sort(-1).values).any(-1).any(-1)
        self.routed += int(known.sum())
        self.disagree += int((differs & known).sum())

    def merge(self, other: MismatchAccumulator) -> None:
        """Add `other`'s sums (another rank's share of the same step) to these."""
        for name, value in vars(other).items():
            if name == "version":
                continue
            mine = getattr(self, name)
            setattr(self, name, max(mine, value) if name in ("abs_max", "stale_max") else mine + value)

    def summary(self) -> dict[str, Any]:
        n = max(self.tokens, 1)
        return {
            "mismatch_mean_abs": self.abs_sum / n,
            "mismatch_max_abs": self.abs_max,
            "mismatch_kl_k3": self.k3_sum / n,
            "fresh_tokens": self.fresh,
            "fresh_mismatch_mean_abs": self.fresh_abs_sum / self.fresh if self.fresh else None,
            "staleness_mean": self.stale_sum / self.stale_n if self.stale_n else 0.0,
            "staleness_max": self.stale_max,
            "routing_disagreement": self.disagree / self.routed if self.routed else None,
            "entropy": self.entropy_sum / n,
        }
