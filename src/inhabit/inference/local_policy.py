"""`LocalPolicy`: the harness's `Policy` on top of any `InferenceEngine` and a chat-template tokenizer.

The harness hands over messages; we render them with the tokenizer's chat template (exact token
ids, so `count_tokens` is exact too), generate with the engine, and return the text plus every
token-level fact RL needs: prompt and completion token ids, logprobs, per-token versions and, for
MoE models, routed experts. `LocalPolicy.from_path(folder)` builds an `EmbeddedEngine` on a local
model folder (what `inhabit agent --model PATH` uses); pass a `RemoteEngine` or `VLLMEngine` to
drive a server instead.

Native tool format: when the harness passes `tools`, the prompt is rendered by the folder's chat
template with them and the completion is parsed with the parser its template's format needs
(`chat_tools.template_parser`, `tool_parsers`); the turn carries the calls as `tool_calls`, and the
completion ids stay exactly what the engine generated.

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
        self._parser: str | bool | None = False  # False: not looked up yet

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
        from inhabit.errors import ConfigError
        from inhabit.inference.embedded import EmbeddedEngine

        engine = EmbeddedEngine.from_path(path, engine_config)
        if not getattr(engine.tokenizer, "chat_template", None):
            engine.close_blocking()
            raise ConfigError(
                f"the model folder {path} has no chat template (chat_template.jinja or "
                "tokenizer_config.json's chat_template), so no conversation can be rendered: add one"
            )
        return cls(
            engine, engine.tokenizer, temperature=temperature, top_p=top_p, seed=seed, owns_engine=True
        )

    @property
    def tool_parser(self) -> str | None:
        """The parser of the template's own tool format; None when the template renders no tools."""
        if self._parser is False:
            from inhabit.inference.chat_tools import template_parser

            self._parser = template_parser(self.tokenizer)
        return self._parser  # type: ignore[return-value]

    def native_tools(self) -> bool:
        return self.tool_parser is not None

    def render(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> list[int]:
        """The prompt token ids for the next assistant turn (with `tools`: the native format)."""
        from inhabit.models.tokenizer import encode_chat

        if tools is not None or any(m.role == "tool" or m.tool_calls for m in messages):
            from inhabit.inference.chat_tools import encode_native

            return encode_native(self.tokenizer, messages, list(tools) if tools is not None else None)
        return encode_chat(self.tokenizer, messages, add_generation_prompt=True)

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> int:
        return len(self.render(messages, tools))

    async def next_turn(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        stop: Sequence[str] = (),
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> LocalPolicyTurn:
        if tools is not None and self.tool_parser is None:
            from inhabit.inference.errors import InvalidRequest

            raise InvalidRequest(
                "this model's chat template renders no `tools` in a format inhabit reads; "
                'use the harness\'s xml tool format (harness.tool_format = "xml")'
            )
        prompt = self.render(messages, tools)
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
        calls, content = None, None
        if tools is not None:
            # A closed <think> block is reasoning: calls are parsed from the text after it only.
            _, sep, tail = c.text.partition("</think>")
            calls, content = self._calls(tail if sep else c.text, tools)
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
            tool_calls=calls,
            content=content,
        )

    def _calls(self, text: str, tools: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
        """(the calls parsed from `text` as `tool_calls` entries with ids unique in the episode's
        policy, the text outside them)."""
        from inhabit.inference.tool_parsers import ParsedCall, make_parser

        assert self.tool_parser is not None
        schemas = {t["function"]["name"]: t["function"].get("parameters") or {} for t in tools}
        parsed = make_parser(self.tool_parser, schemas).parse(text)
        n = self._turns
        calls = [
            ParsedCall(c.name, c.arguments, id=f"call_{n}_{i}").wire() for i, c in enumerate(parsed.calls)
        ]
        return calls, parsed.content.strip()

    async def close(self) -> None:
        if self._owns_engine:
            await self.engine.close()
