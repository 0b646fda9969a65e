"""`LocalPolicy`: the harness's `Policy` on top of any `InferenceEngine` and a chat-template tokenizer.

The harness hands over messages; we render them with the tokenizer's chat template (exact token
ids, so `count_tokens` is exact too), generate with the engine, and return the text plus every
token-level fact RL needs: prompt and completion token ids, logprobs, per-token versions and, for
MoE models, routed experts. `LocalPolicy.from_path(folder)` builds an `EmbeddedEngine` on a local
model folder (what `inhabit agent --model PATH` uses); pass a `RemoteEngine` or `VLLMEngine` to
drive a server instead.

The turn it returns is a `LocalPolicyTurn`, a `PolicyTurn` with one more field,
`prompt_routed_experts` (routes of prompt positions 0..P-2; see engine.py), so a trainer can replay
routing over the whole prompt+completion.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.inference.config import EngineConfig
from inhabit.inference.engine import GenerationRequest, InferenceEngine, SamplingParams


@dataclass(frozen=True)
class LocalPolicyTurn(PolicyTurn):
    """A PolicyTurn that also says why the engine failed, when it did."""

    error: str | None = None


class LocalPolicy(Policy):
    """A Policy backed by an InferenceEngine (see module docstring)."""

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: Any,
        *,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
        context_window: int | None = None,
        owns_engine: bool = False,
    ) -> None:
        self.engine, self.tokenizer = engine, tokenizer
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.context_window = context_window or int(
            getattr(engine, "max_model_len", None) or Policy.context_window
        )
        self._owns_engine = owns_engine
        self._turns = 0

    @classmethod
    def from_path(
        cls,
        path: str | Path,
        *,
        engine_config: EngineConfig | None = None,
        temperature: float = 1.0,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> LocalPolicy:
        """A policy that runs the model folder at `path` in this process (EmbeddedEngine)."""
        from inhabit.inference.embedded import EmbeddedEngine

        engine = EmbeddedEngine.from_path(path, engine_config)
        return cls(
            engine, engine.tokenizer, temperature=temperature, top_p=top_p, seed=seed, owns_engine=True
        )

    def render(self, messages: Sequence[Message]) -> list[int]:
        """The prompt token ids for the next assistant turn."""
        from inhabit.models.tokenizer import encode_chat

        return encode_chat(self.tokenizer, messages, add_generation_prompt=True)

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(self.render(messages))

    async def next_turn(
        self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()
    ) -> LocalPolicyTurn:
        prompt = self.render(messages)
        room = min(max_tokens, self.context_window - len(prompt))
        if room < 1:
            return LocalPolicyTurn(
                text="", finish_reason="length", prompt_token_ids=prompt, prompt_tokens=len(prompt),
                completion_tokens=0, error=f"the prompt ({len(prompt)} tokens) fills the context window",
            )  # fmt: skip
        seed = None if self.seed is None else self.seed + self._turns
        self._turns += 1
        sampling = SamplingParams(
            temperature=self.temperature, top_p=self.top_p, max_tokens=room, stop=tuple(stop), seed=seed
        )
        (c,) = await self.engine.generate([GenerationRequest(prompt, sampling)])
        return LocalPolicyTurn(
            text=c.text,
            finish_reason=c.finish_reason,
            prompt_token_ids=prompt,
            completion_token_ids=list(c.token_ids),
            logprobs=list(c.logprobs),
            routed_experts=c.routed_experts,
            versions=list(c.versions),
            prompt_tokens=len(prompt),
            completion_tokens=len(c.token_ids),
            prompt_routed_experts=c.prompt_routed_experts,
            error=c.error,
        )

    async def close(self) -> None:
        if self._owns_engine:
            await self.engine.close()
