"""Token sampling for a batch of rows, each with its own temperature, top-p and random generator.

Reproducibility: each row draws exactly one uniform number per token from its own
`torch.Generator` (seeded from the request's `seed`) and picks the token by inverse CDF, so a
seeded request samples the same tokens whatever else shares its batch, provided its logits are
the same. (On CPU, a matmul over a different batch size can change the last bits of the logits,
which can flip a draw that lies exactly on a boundary; same batch shape, same tokens.)

Logprobs: `logprobs_mode="tempered"` reports log_softmax(logits / T) of the sampled token, the
distribution the engine sampled from before top-p truncation. That is what an RL trainer
recomputes when it scales its logits by the same temperature; with top_p < 1 the truncated
distribution differs (the kept tokens' probabilities are renormalized), which we do not fold in
because trainers do not either. `raw` reports log_softmax(logits), whatever T. Greedy rows
(T = 0) always report raw.

Penalties and logit bias (OpenAI's semantics): a row's logits first get `logit_bias[t]` added and
`count(t) * frequency_penalty + (count(t) > 0) * presence_penalty` subtracted, `count(t)` being how
often token t already appears in that row's completion (the prompt does not count). Everything
after (temperature, top-p, the draw and the reported logprobs, raw or tempered) works on the
adjusted logits, so the logprobs describe the distribution actually sampled, not the model's.

Token masks (constrained decoding, constrained.py): a row's `allowed` tensor sets every other
token to -inf for the draw only (greedy picks, top-p and the inverse CDF all see the masked
logits); the reported logprobs and top logprobs come from the unmasked (penalty-adjusted) logits,
the model's own distribution, so a trainer recomputing them from the weights finds the same numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class RowSampling:
    """Sampling settings of one row of the batch."""

    temperature: float
    top_p: float
    generator: torch.Generator
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: Sequence[tuple[int, float]] = ()
    completion: Sequence[int] = ()  # the tokens this row generated so far (for the penalties)
    allowed: torch.Tensor | None = None  # bool [V]: the tokens a grammar allows at this step

    def adjusts(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.logit_bias)


def sample_tokens(
    logits: torch.Tensor, rows: Sequence[RowSampling], logprobs_mode: str = "tempered", top_k: int = 0
) -> tuple[torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None]:
    """Pick one token per row of `logits` [B, V].

    Returns (token ids [B], their logprobs [B], and when top_k > 0 the (logprobs, ids) [B, top_k]
    of each row's most likely tokens under the same reported distribution).
    """
    assert logits.dim() == 2 and logits.shape[0] == len(rows)
    logits = logits.float()
    if any(r.adjusts() for r in rows):
        logits = _adjust(logits.clone(), rows)
    # The draw sees masked logits; the report (below) the model's. Without masks they are one tensor.
    draw = _masked(logits, rows)
    temps = torch.tensor([r.temperature for r in rows], dtype=torch.float32, device=logits.device)
    # Shortcuts below skip only work whose result is not used or is exact (x / 1.0 == x), so every
    # batch samples and reports bit for bit what the general path would.
    any_greedy = any(r.temperature <= 0 for r in rows)
    greedy = temps <= 0
    unit_t = all(r.temperature == 1.0 for r in rows)
    safe_t = torch.where(greedy, torch.ones_like(temps), temps)

    def tempered(x: torch.Tensor) -> torch.Tensor:
        return x if unit_t else x / safe_t[:, None]

    scaled = tempered(draw)
    logp_draw = torch.log_softmax(scaled, dim=-1)

    # One uniform per sampled row, from that row's own generator (greedy rows draw nothing, so a
    # greedy request never shifts another's stream).
    if all(r.temperature <= 0 for r in rows):
        tokens = draw.argmax(dim=-1)
    else:
        draws = [
            torch.rand((), generator=r.generator, dtype=torch.float64).item() if r.temperature > 0 else 0.0
            for r in rows
        ]
        u = torch.tensor(draws, dtype=torch.float64)
        probs = logp_draw.double().exp()
        top_ps = [r.top_p for r in rows]
        if any(p < 1.0 for p in top_ps):
            tokens = _sample_top_p(probs, torch.tensor(top_ps, dtype=torch.float64), u)
        else:
            tokens = _inverse_cdf(probs, u)
        if any_greedy:
            tokens = torch.where(greedy, draw.argmax(dim=-1), tokens)

    if draw is logits:
        logp_scaled = logp_draw
    else:
        scaled = tempered(logits)
        logp_scaled = torch.log_softmax(scaled, dim=-1)
    if logprobs_mode == "raw":
        logp = logp_scaled if scaled is logits else torch.log_softmax(logits, dim=-1)
    elif any_greedy:
        logp = torch.where(greedy[:, None], torch.log_softmax(logits, dim=-1), logp_scaled)
    else:
        logp = logp_scaled
    chosen = logp.gather(1, tokens[:, None]).squeeze(1)
    top = torch.topk(logp, min(top_k, logp.shape[-1]), dim=-1) if top_k > 0 else None
    return tokens, chosen, (None if top is None else (top.values, top.indices))


def _masked(logits: torch.Tensor, rows: Sequence[RowSampling]) -> torch.Tensor:
    """`logits` with each masked row's disallowed tokens at -inf (the same tensor if no row is)."""
    if all(r.allowed is None for r in rows):
        return logits
    out = logits.clone()
    for i, r in enumerate(rows):
        if r.allowed is not None:
            out[i].masked_fill_(~r.allowed.to(out.device), float("-inf"))
    return out


def _adjust(logits: torch.Tensor, rows: Sequence[RowSampling]) -> torch.Tensor:
    """Add each row's logit bias and subtract its presence/frequency penalties, in place."""
    vocab = logits.shape[-1]
    for i, r in enumerate(rows):
        if not r.adjusts():
            continue
        for tok, bias in r.logit_bias:
            if 0 <= tok < vocab:
                logits[i, tok] += bias
        if r.completion and (r.presence_penalty or r.frequency_penalty):
            ids = torch.tensor(list(r.completion), dtype=torch.long, device=logits.device)
            counts = torch.bincount(ids, minlength=vocab)[:vocab].to(logits.dtype)
            logits[i] -= counts * r.frequency_penalty + (counts > 0).to(logits.dtype) * r.presence_penalty
    return logits


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    cdf = probs.cumsum(dim=-1)
    # Scale by the row total so rounding in the cumsum can never leave u past the end.
    idx = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(1)
    idx = idx.clamp_(max=probs.shape[-1] - 1)
    # Never land on a zero-probability token (possible only through rounding at a boundary).
    bad = probs.gather(1, idx[:, None]).squeeze(1) <= 0
    if bool(bad.any()):
        idx = torch.where(bad, probs.argmax(dim=-1), idx)
    return idx


def _sample_top_p(probs: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    sorted_p, order = probs.sort(dim=-1, descending=True)
    before = sorted_p.cumsum(dim=-1) - sorted_p
    # Keep the smallest prefix whose mass reaches top_p (always at least the top token).
    keep = before < top_p[:, None]
    keep[:, 0] = True
    sorted_p = sorted_p * keep
    pick = _inverse_cdf(sorted_p, u)
    return order.gather(1, pick[:, None]).squeeze(1)


def make_generator(seed: int | None, fallback: torch.Generator) -> torch.Generator:
    """A generator for one request: seeded if asked, else seeded from the engine's own stream."""
    g = torch.Generator(device="cpu")
    if seed is None:
        seed = int(torch.randint(0, 2**62, (), generator=fallback))
    g.manual_seed(int(seed))
    return g
