"""The inference-engine interface: what the embedded engine, remote servers and vLLM provide.

The harness never talks to an engine directly (it talks to a `Policy`); the orchestrator and the
weight subscriber do. Contract for RL: every completion carries the sampled token ids, the
engine's logprob of each, routed expert ids per token and layer for mixture-of-experts models,
and the policy version that produced each token. `load_weights` takes effect between decoding
steps, never inside one, so a request that spans a swap has per-token versions that change once.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

    from inhabit.inference.constrained import Guide

FinishReason = Literal["stop", "length", "abort", "error"]


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling settings (OpenAI semantics where they overlap)."""

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 256
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None
    top_logprobs: int = 0
    """Also report this many most likely tokens (id -> logprob) at each step (OpenAI top_logprobs)."""
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    """OpenAI's logit adjustments (sampling.py applies them; the reported logprobs then describe
    the adjusted distribution, which the model's own logits do not reproduce)."""

    guide: Guide | None = None
    """Constrained decoding: the language the output must belong to (constrained.py)."""

    def adjusted(self) -> bool:
        return bool(self.presence_penalty or self.frequency_penalty or self.logit_bias)


@dataclass(frozen=True)
class GenerationRequest:
    """A prompt as token ids plus how to sample its continuation."""

    prompt_token_ids: list[int]
    sampling: SamplingParams = field(default_factory=SamplingParams)
    request_id: str = ""


@dataclass(frozen=True)
class Completion:
    """The continuation of one request, with everything the trainer needs."""

    request_id: str
    token_ids: list[int]
    logprobs: list[float]
    """Logprob of each sampled token under the engine's weights at the time it was sampled."""
    versions: list[int]
    """Policy version that produced each token (changes at most at swap boundaries)."""
    finish_reason: FinishReason
    text: str = ""
    routed_experts: list[list[list[int]]] | None = None
    """For MoE models: [token][layer][k] expert ids chosen when the token was computed."""
    prompt_token_ids: list[int] | None = None
    error: str | None = None
    top_logprobs: list[dict[int, float]] | None = None
    """Per token, the `SamplingParams.top_logprobs` most likely token ids and their logprobs."""
    prompt_routed_experts: list[list[list[int]]] | None = None
    """For MoE models: [position][layer][k] routes of prompt positions 0..P-2. Completion token i's
    routes (above) are those of input position P-1+i, the forward that produced its logits, so
    prompt_routed_experts + routed_experts covers positions 0..N-2 of prompt+completion: all a
    full-sequence replay needs (the last position's logits are never used)."""


class InferenceEngine(abc.ABC):
    """Async engine: many concurrent `generate` calls are batched together by the engine."""

    @abc.abstractmethod
    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Generate continuations; results come back in request order."""

    @abc.abstractmethod
    async def load_weights(self, weights: Mapping[str, torch.Tensor] | str | Path, version: int) -> None:
        """Swap in new weights (a state dict or a model folder) between decoding steps."""

    @property
    @abc.abstractmethod
    def version(self) -> int:
        """Policy version of the weights currently loaded."""

    def decode_counts(self) -> tuple[int, int] | None:
        """(decode steps, sequences decoded summed over those steps) since the engine started, for
        the mean decode batch; None for engines that do not count (remote ones)."""
        return None

    async def close(self) -> None:  # noqa: B027 - optional hook, nothing to free by default
        """Stop background work and free memory."""
