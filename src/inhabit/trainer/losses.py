"""RL loss functions, pure (tensors in, tensors out): group-relative advantages and the policy loss.

Three log-probabilities of each generated token meet here (all natural logs, aligned per token):

* `behaviour` (mu): what the inference engine reported when it sampled the token. It may come from
  an older policy version (asynchronous RL) and, even for the same version, differs slightly from
  the trainer's numbers (batching, KV cache, dtype, MoE routing).
* `proximal` (pi_old): the trainer's own recomputation under the weights it is about to update,
  without gradient. With one optimizer update per batch it is `logprobs.detach()`.
* `logprobs` (pi_theta): the same recomputation with gradient.

The ratio the clipped objective sees is split in two (the "decoupled" PPO form), whose product is
the plain PPO ratio against the behaviour policy pi_theta / mu:

* the importance weight rho = pi_old / mu (no gradient) corrects for staleness and engine/trainer
  mismatch. By default it is truncated at `tis_cap` (truncated importance sampling, TIS); tokens
  (or whole sequences) whose rho leaves [mask_low, mask_high] can also be masked out.
* the trust-region ratio r = pi_theta / pi_old is clipped to [1 - eps_low, 1 + eps_high]. With one
  optimizer update per batch r == 1 and the clip is inactive; with `updates_per_step > 1` in the
  trainer it bounds how far the later updates move.

Token variant (PPO / GRPO / DAPO style), per generated token t of sample i:

    loss_it = -w_it * min(r_it * A_i, clip(r_it, 1 - eps_low, 1 + eps_high) * A_i)

Sequence variant (GSPO style): one length-normalized ratio per sample,
s_i = exp(mean_t(log pi_theta - log pi_old)), and one weight w_i from the geometric-mean rho_i:

    loss_i = -w_i * min(s_i * A_i, clip(s_i, 1 - eps_low, 1 + eps_high) * A_i)

(GSPO uses much smaller eps, e.g. 3e-4 / 4e-4, because s_i is an average of log-ratios.)

Negative advantages can be scaled down (`negative_scale` < 1): in a group with one success in
eight, seven failed samples share the negative mass, and their gradient lowers the probability
of every confident token they contain (grammar, file names) after their first mistake, which
raises the entropy of a small model everywhere; tempering them keeps the push toward the success.

Aggregation (token variant): `token_mean` divides the sum of token losses by the number of
generated tokens in the whole step (every token weighs the same, long answers are not diluted);
`seq_mean_token_mean` averages tokens within a sample, then samples (classic GRPO);
`seq_mean_token_sum` sums tokens within a sample, then averages samples (a sample's weight grows
with its length; no per-length normalization bias, but scale the learning rate down). The sequence
variant always averages over samples. Normalizers are passed in (`num_tokens`, `num_sequences`) so
that a step split into micro-batches with gradient accumulation gives exactly the gradient of the
whole batch. Masked tokens keep counting in the normalizer, so masking never inflates the weight
of the other tokens.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from pydantic import Field, model_validator

from inhabit.config import Config


class LossConfig(Config):
    """Which policy loss, how it is clipped, aggregated and corrected for off-policy samples."""

    variant: Literal["token", "sequence"] = Field(
        "token", description="token: PPO/GRPO-style per-token ratio; sequence: GSPO-style per-sample ratio."
    )
    eps_low: float = Field(0.2, ge=0.0, le=1.0, description="Lower clip: ratio below 1 - eps_low is clipped.")
    eps_high: float = Field(0.28, ge=0.0, le=10.0, description="Upper clip: ratio above 1 + eps_high.")
    aggregation: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum"] = Field(
        "token_mean", description="How token losses become one number (token variant only; see losses.py)."
    )
    tis_cap: float | None = Field(
        2.0,
        gt=0.0,
        description="Truncate the importance weight pi_trainer/pi_engine at this value; None: no weighting.",
    )
    mask: Literal["none", "token", "sequence"] = Field(
        "none",
        description="Drop tokens (or whole samples, by their geometric-mean ratio) whose importance "
        "ratio leaves [mask_low, mask_high]. The sequence variant always masks whole samples.",
    )
    negative_scale: float = Field(
        1.0,
        ge=0.0,
        le=1.0,
        description="Multiply negative advantages by this (1: plain GRPO). Below 1 tempers the push "
        "away from worse-than-average samples, which in small models raises entropy at every token "
        "of a failed sample; 0 learns from better-than-average samples only.",
    )
    mask_low: float = Field(0.5, ge=0.0, description="Lower end of the kept importance-ratio band.")
    mask_high: float = Field(2.0, gt=0.0, description="Upper end of the kept importance-ratio band.")

    @model_validator(mode="after")
    def _check_band(self) -> LossConfig:
        if self.mask_low >= self.mask_high:
            raise ValueError(f"mask_low ({self.mask_low}) must be below mask_high ({self.mask_high})")
        return self


def group_advantages(
    rewards: Sequence[float] | torch.Tensor,
    group_ids: Sequence[Hashable],
    *,
    normalize_std: bool = False,
    eps: float = 1e-6,
) -> torch.Tensor:
    """Group-relative advantages: each reward minus its group's mean (GRPO).

    With `normalize_std` the centred value is divided by the group's population standard deviation
    (plus `eps`). A group whose rewards are all equal (one member, or no variance) gets advantage
    exactly 0: it says nothing about which rollout was better.
    """
    r = torch.as_tensor(rewards, dtype=torch.float64).flatten()
    if r.numel() != len(group_ids):
        raise ValueError(f"{r.numel()} rewards but {len(group_ids)} group ids")
    out = torch.zeros_like(r)
    index: dict[Hashable, list[int]] = {}
    for i, g in enumerate(group_ids):
        index.setdefault(g, []).append(i)
    for members in index.values():
        idx = torch.tensor(members)
        group = r[idx]
        centred = group - group.mean()
        std = group.std(unbiased=False) if len(members) > 1 else torch.tensor(0.0, dtype=r.dtype)
        if float(std) == 0.0:
            continue  # zero variance: advantage 0, never centred + rounding noise
        out[idx] = centred / (std + eps) if normalize_std else centred
    return out.float()


@dataclass
class LossStats:
    """Sums and extremes over the tokens of a batch, so micro-batches merge exactly (`merge`)."""

    tokens: int = 0
    sequences: int = 0
    ratio_sum: float = 0.0
    """Sum over tokens of rho = pi_trainer / pi_engine (token variant) or of each sample's rho
    repeated over its tokens (sequence variant)."""
    ratio_min: float = float("inf")
    ratio_max: float = float("-inf")
    truncated: int = 0
    """Tokens whose weight was cut to tis_cap."""
    masked: int = 0
    """Tokens dropped by the ratio band."""
    clipped: int = 0
    """Tokens where the clipped term of the objective was the active one."""

    def merge(self, other: LossStats) -> LossStats:
        return LossStats(
            tokens=self.tokens + other.tokens,
            sequences=self.sequences + other.sequences,
            ratio_sum=self.ratio_sum + other.ratio_sum,
            ratio_min=min(self.ratio_min, other.ratio_min),
            ratio_max=max(self.ratio_max, other.ratio_max),
            truncated=self.truncated + other.truncated,
            masked=self.masked + other.masked,
            clipped=self.clipped + other.clipped,
        )

    def summary(self) -> dict[str, float]:
        """Means and fractions (what a step logs)."""
        n = max(self.tokens, 1)
        return {
            "ratio_mean": self.ratio_sum / n if self.tokens else 1.0,
            "ratio_min": self.ratio_min if self.tokens else 1.0,
            "ratio_max": self.ratio_max if self.tokens else 1.0,
            "truncated_fraction": self.truncated / n,
            "masked_fraction": self.masked / n,
            "clip_fraction": self.clipped / n,
        }


def policy_loss(
    logprobs: torch.Tensor,
    proximal_logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    config: LossConfig,
    *,
    num_tokens: int | None = None,
    num_sequences: int | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """The clipped policy-gradient loss of one (micro-)batch, and its statistics.

    Shapes: `logprobs`, `proximal_logprobs`, `behaviour_logprobs` and `mask` are [B, T] (entry
    [i, t] belongs to token t of sample i; `mask` is True at generated tokens the loss covers),
    `advantages` is [B]. `num_tokens` / `num_sequences` are the normalizers of the whole step (see
    the module docstring); they default to this batch's own counts.
    """
    mask = mask.bool()
    m = mask.to(logprobs.dtype)
    lengths = m.sum(-1)
    has = lengths > 0
    n_tok = int(mask.sum()) if num_tokens is None else num_tokens
    n_seq = int(has.sum()) if num_sequences is None else num_sequences
    prox = proximal_logprobs.detach().to(logprobs.dtype)
    beh = behaviour_logprobs.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype)
    if config.negative_scale != 1.0:
        adv = torch.where(adv < 0, adv * config.negative_scale, adv)
    stats = LossStats(tokens=int(mask.sum()), sequences=int(has.sum()))
    if stats.tokens == 0:
        return logprobs.sum() * 0.0, stats

    # Importance weight rho = pi_old / mu: per token, or per sample as the geometric mean of its
    # tokens' ratios (sequence variant, and the `sequence` mask of the token variant).
    log_rho_tok = (prox - beh).masked_fill(~mask, 0.0)
    seq_rho = torch.exp(log_rho_tok.sum(-1) / lengths.clamp(min=1))
    rho = torch.exp(log_rho_tok) if config.variant == "token" else seq_rho[:, None].expand_as(logprobs)
    keep = mask.clone()
    if config.mask == "token" and config.variant == "token":
        keep &= (rho >= config.mask_low) & (rho <= config.mask_high)
    elif config.mask != "none":  # sequence masking (the only kind the sequence variant has)
        keep &= ((seq_rho >= config.mask_low) & (seq_rho <= config.mask_high))[:, None]
    weight = rho.clamp(max=config.tis_cap) if config.tis_cap is not None else torch.ones_like(rho)
    weight = weight * keep.to(weight.dtype)

    lo, hi = 1.0 - config.eps_low, 1.0 + config.eps_high
    if config.variant == "token":
        ratio = torch.exp((logprobs - prox).masked_fill(~mask, 0.0))
        a = adv[:, None]
        unclipped, clipped = ratio * a, ratio.clamp(lo, hi) * a
        per_token = -weight * torch.minimum(unclipped, clipped) * m
        clip_active = ((a > 0) & (ratio > hi)) | ((a < 0) & (ratio < lo))
        if config.aggregation == "token_mean":
            loss = per_token.sum() / max(n_tok, 1)
        elif config.aggregation == "seq_mean_token_mean":
            loss = (per_token.sum(-1) / lengths.clamp(min=1)).sum() / max(n_seq, 1)
        else:
            loss = per_token.sum() / max(n_seq, 1)
    else:
        s = torch.exp(((logprobs - prox) * m).sum(-1) / lengths.clamp(min=1))
        keep_seq = keep.any(-1)
        w = seq_rho.clamp(max=config.tis_cap) if config.tis_cap is not None else torch.ones_like(seq_rho)
        w = w * keep_seq.to(w.dtype)
        per_seq = -w * torch.minimum(s * adv, s.clamp(lo, hi) * adv) * has.to(s.dtype)
        loss = per_seq.sum() / max(n_seq, 1)
        clip_active = (((adv > 0) & (s > hi)) | ((adv < 0) & (s < lo)))[:, None].expand_as(mask)

    with torch.no_grad():
        rho_tok = rho[mask]
        stats.ratio_sum = float(rho_tok.sum())
        stats.ratio_min = float(rho_tok.min())
        stats.ratio_max = float(rho_tok.max())
        if config.tis_cap is not None:
            stats.truncated = int(((rho > config.tis_cap) & keep).sum())
        stats.masked = int((mask & ~keep).sum())
        stats.clipped = int((clip_active & keep).sum())
    return loss, stats


def sft_loss(logprobs: torch.Tensor, mask: torch.Tensor, *, num_tokens: int | None = None) -> torch.Tensor:
    """Supervised next-token loss: the negative log-likelihood of the masked tokens divided by
    `num_tokens` (the whole step's count, for exact gradient accumulation; default: this batch's)."""
    m = mask.to(logprobs.dtype)
    n = int(mask.sum()) if num_tokens is None else num_tokens
    return -(logprobs * m).sum() / max(n, 1)


def k3(logprobs: torch.Tensor, reference: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum over masked tokens of exp(d) - d - 1, d = reference - logprobs: the k3 estimate of
    KL(policy || reference) from tokens the policy sampled (unbiased, >= 0 for every token)."""
    d = (reference - logprobs).masked_fill(~mask.bool(), 0.0)
    return (torch.exp(d) - d - 1).sum()
