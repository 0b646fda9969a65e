"""Inference/training mismatch: how far an engine's token logprobs and routes are from a full forward.

For each completion we run one full-sequence forward of prompt+completion through `model` (the
trainer's view: no KV cache, no batching) and compare, token by token, the logprob the engine
reported with the one the forward gives, transformed the same way (see sampling.py: tempered
log_softmax(logits / T) or raw). For MoE models we also compare the experts every layer chose for
every position, and repeat the logprob comparison under `RoutingReplay` of the engine's routes
(what a trainer that replays routes sees). In fp32 with the same weights all of these should be
at rounding level (differences ~1e-6, no routing disagreement); bf16 or a stale cache shows up
here first.

Tokens produced by weights other than `version` (when given) are skipped and counted, because a
forward of the current weights is not their reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import torch

from inhabit.inference.engine import Completion


@dataclass(frozen=True)
class MismatchReport:
    """Logprob and routing disagreement between an engine and a full forward."""

    tokens: int
    mean_abs_diff: float
    max_abs_diff: float
    skipped_tokens: int = 0
    routed_tokens: int = 0
    routing_disagreement: float | None = None
    """Fraction of scored positions where any layer's expert set differs (MoE only)."""
    replay_mean_abs_diff: float | None = None
    replay_max_abs_diff: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@torch.inference_mode()
def measure_mismatch(
    model: Any,
    completions: Sequence[Completion],
    *,
    temperatures: float | Sequence[float] = 1.0,
    logprobs_mode: str = "tempered",
    version: int | None = None,
) -> MismatchReport:
    """Compare `completions` (from an engine) with full forwards of `model` (see module docstring)."""
    from inhabit.models.routing import RoutingCapture, RoutingReplay, is_moe

    temps = [temperatures] * len(completions) if isinstance(temperatures, int | float) else list(temperatures)
    moe = is_moe(model)
    diffs: list[torch.Tensor] = []
    replay_diffs: list[torch.Tensor] = []
    disagree = routed = skipped = 0
    device = next(model.parameters()).device
    for comp, temp in zip(completions, temps, strict=True):
        if not comp.token_ids or comp.prompt_token_ids is None:
            continue
        prompt, toks = comp.prompt_token_ids, comp.token_ids
        keep = torch.tensor([version is None or v == version for v in comp.versions])
        skipped += int((~keep).sum())
        if not bool(keep.any()):
            continue
        ids = torch.tensor([prompt + toks], device=device)
        engine_lp = torch.tensor(comp.logprobs, dtype=torch.float64)
        capture = RoutingCapture(model) if moe else contextlib.nullcontext()
        with capture:
            logits = model(input_ids=ids).logits[0].float()
        ref = _token_logprobs(logits, prompt, toks, temp, logprobs_mode)
        diffs.append((ref - engine_lp)[keep].abs())
        routes = _full_routes(comp)
        if moe and routes is not None:
            got = capture.expert_ids(0)[:, : routes.shape[1]]  # (L, N-1, k)
            positions = torch.cat([torch.zeros(len(prompt) - 1, dtype=torch.bool), keep])[: routes.shape[1]]
            differs = (got.sort(-1).values != routes.sort(-1).values).any(-1).any(0)  # per position
            disagree += int(differs[positions].sum())
            routed += int(positions.sum())
            with RoutingReplay(model, full_sequence_routes(comp)):
                replay_logits = model(input_ids=ids).logits[0].float()
            replay = _token_logprobs(replay_logits, prompt, toks, temp, logprobs_mode)
            replay_diffs.append((replay - engine_lp)[keep].abs())
    all_d = torch.cat(diffs) if diffs else torch.zeros(0, dtype=torch.float64)
    rep = torch.cat(replay_diffs) if replay_diffs else None
    return MismatchReport(
        tokens=int(all_d.numel()),
        mean_abs_diff=float(all_d.mean()) if all_d.numel() else 0.0,
        max_abs_diff=float(all_d.max()) if all_d.numel() else 0.0,
        skipped_tokens=skipped,
        routed_tokens=routed,
        routing_disagreement=(disagree / routed) if routed else None,
        replay_mean_abs_diff=float(rep.mean()) if rep is not None and rep.numel() else None,
        replay_max_abs_diff=float(rep.max()) if rep is not None and rep.numel() else None,
    )


def _token_logprobs(
    logits: torch.Tensor, prompt: list[int], toks: list[int], temp: float, mode: str
) -> torch.Tensor:
    p = len(prompt)
    rows = logits[p - 1 : p - 1 + len(toks)]
    if mode == "tempered" and temp > 0:
        rows = rows / temp
    lp = torch.log_softmax(rows, dim=-1)
    return lp.gather(1, torch.tensor(toks, device=lp.device)[:, None]).squeeze(1).double().cpu()


def _full_routes(comp: Completion) -> torch.Tensor | None:
    """(layers, N-1, k) routes of positions 0..N-2 from an engine's completion, or None."""
    if not comp.routed_experts or comp.prompt_routed_experts is None:
        return None
    from inhabit.models.routing import layer_major

    return layer_major(list(comp.prompt_routed_experts) + list(comp.routed_experts))


def full_sequence_routes(comp: Completion) -> torch.Tensor | None:
    """(layers, N, k) routes for replaying prompt+completion in one forward; the last position is -1
    (route freely: its logits predict nothing the completion holds)."""
    routes = _full_routes(comp)
    if routes is None:
        return None
    free_last = torch.full((routes.shape[0], 1, routes.shape[2]), -1, dtype=torch.long)
    return torch.cat([routes, free_last], dim=1)
