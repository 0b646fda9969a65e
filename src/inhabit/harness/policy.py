"""The `Policy` interface: whatever produces the agent's next turn.

Implementations: a replay of an actions file, any OpenAI-compatible endpoint, and a local model
on top of an `InferenceEngine`. The harness only sees text in and a `PolicyTurn` out; token ids,
logprobs, routed experts and versions ride along (None where a policy cannot know them) so the
very same loop produces training data in RL and plain answers in `inhabit agent`.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class Message:
    """One chat message as the harness renders it."""

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class PolicyTurn:
    """The policy's answer for one turn, plus the token-level facts RL needs."""

    text: str
    finish_reason: str = "stop"
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    routed_experts: list[list[list[int]]] | None = None
    """MoE only: [completion token][layer][k] expert ids of the forward that produced each token."""
    prompt_routed_experts: list[list[list[int]]] | None = None
    """MoE only: [prompt position][layer][k] for prompt positions 0..P-2 (vLLM's layout), so a trainer
    can replay the prompt's routing too."""
    versions: list[int] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


class Policy(abc.ABC):
    """Produces the next assistant turn for a conversation."""

    context_window: int = 8192
    """Tokens the policy can attend to; the harness summarizes before a turn would exceed it."""

    @abc.abstractmethod
    async def next_turn(
        self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()
    ) -> PolicyTurn:
        """Return the next assistant turn for `messages`."""

    @abc.abstractmethod
    def count_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens `messages` occupy once rendered (exact where the tokenizer is known)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Free connections or engines the policy holds."""
