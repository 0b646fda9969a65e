"""`OpenAIPolicy`: any OpenAI-compatible chat-completions endpoint (vLLM, SGLang, inhabit's server).

Retries: connection errors, timeouts, 429 and 5xx are retried with exponential backoff and
jitter up to `max_retries`; other errors (400, 401, 404) fail at once. The policy raises
`InferenceError` after the last try, which the loop records as a `policy_error` rollout.

An endpoint that cannot be used at all raises `PolicyUnreachable` instead, which ends the command:
a connection that fails before the endpoint ever answered (a wrong URL or a server that is down:
no retries, they would only delay the same answer), one that still fails after every retry, a
model name it does not serve (404) and a refused key (401, 403).

Tokens: `count_tokens` is an estimate (characters / a ratio), calibrated from the server's
`usage.prompt_tokens` whenever it returns one; exact counts need a local tokenizer (LocalPolicy).
Token ids, logprobs, routed experts and versions are captured when the server returns them:
standard `logprobs` content, plus the fields `prompt_token_ids`, `token_ids`, `routed_experts`
(vLLM's base64 `.npy` layout, split into prompt and completion routes) and `policy_versions` (or
`versions`) if present on the choice or the response (vLLM and inhabit's server extensions).

Native tool format (the harness passes `tools`): the request carries `tools`, earlier calls as
assistant `tool_calls` and observations as `tool` messages; the endpoint's `message.tool_calls`
become the turn's calls. The policy cannot see the endpoint's template: `probe_tools()` asks the
endpoint (`GET /v1/models`: `inhabit serve` reports its `tool_call_parser`), and `tool_format =
"auto"` then goes native where the endpoint parses its model's own call format, XML otherwise
(an endpoint that does not say, such as vLLM, stays XML); ask for `native` explicitly where the
endpoint serves tools without saying so (vLLM with a tool parser, a hosted API).
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from typing import Any

from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.errors import InferenceError, PolicyUnreachable
from inhabit.log import get_logger

log = get_logger(__name__)

_PER_MESSAGE_OVERHEAD = 4


class OpenAIPolicy(Policy):
    """Chat completions over HTTP with retries, timeouts and best-effort token facts."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        context_window: int = 32_768,
        temperature: float = 0.0,
        timeout_s: float = 120.0,
        max_retries: int = 4,
        backoff_s: float = 0.5,
        logprobs: bool = False,
    ) -> None:
        import openai

        self.base_url = base_url
        self.model = model
        self.context_window = context_window
        self.temperature = temperature
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.logprobs = logprobs
        self.chars_per_token = 3.5  # conservative until the server's usage calibrates it
        self._answered = False  # has the endpoint ever answered (any HTTP status)?
        self._native: bool | None = None  # does it parse its model's own tool calls? (probe_tools)
        self._client = openai.AsyncOpenAI(
            base_url=base_url, api_key=api_key or "not-needed", timeout=timeout_s, max_retries=0
        )

    async def _resolve_model(self) -> str:
        if self.model is None:
            models = await self._call(lambda: self._client.models.list())
            ids = [m.id for m in models.data]
            if not ids:
                raise InferenceError(f"{self.base_url} serves no models; pass a model name")
            self.model = ids[0]
        return self.model

    async def _call(self, make: Any) -> Any:
        import openai

        for attempt in range(self.max_retries + 1):
            try:
                result = await make()
            except openai.APITimeoutError as e:
                error: Exception = e
            except openai.APIConnectionError as e:
                root = e.__cause__ or e  # httpx's error says what happened (refused, no such host)
                cause = f"{type(root).__name__}: {root}"
                if not self._answered:
                    raise PolicyUnreachable(
                        f"cannot connect to {self.base_url} ({cause}); is a server running at that URL?"
                    ) from e
                if attempt == self.max_retries:
                    raise PolicyUnreachable(
                        f"{self.base_url} went away ({cause}, {attempt + 1} tries)"
                    ) from e
                error = e
            except (openai.RateLimitError, openai.InternalServerError) as e:
                self._answered = True
                error = e
            except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
                raise PolicyUnreachable(
                    f"{self.base_url} refused the API key ({e.status_code}: {_message(e)}); "
                    "pass the right one with --api-key or OPENAI_API_KEY"
                ) from e
            except openai.NotFoundError as e:
                raise PolicyUnreachable(
                    f"{self.base_url} answered 404 ({_message(e)}); check the URL (it ends in /v1) "
                    "and the model name"
                ) from e
            except openai.APIError as e:
                raise InferenceError(f"{self.base_url}: {type(e).__name__}: {e}") from e
            else:
                self._answered = True
                return result
            if attempt == self.max_retries:
                raise InferenceError(
                    f"{self.base_url}: {type(error).__name__} after {attempt + 1} tries: {error}"
                ) from error
            delay = self.backoff_s * 2**attempt * (0.5 + random.random())
            log.warning("endpoint %s: %s; retrying in %.1fs", self.base_url, type(error).__name__, delay)
            await asyncio.sleep(delay)
        raise AssertionError("unreachable")

    def native_tools(self) -> bool | None:
        return self._native  # None until `probe_tools` learns it (or when the endpoint does not say)

    async def probe_tools(self) -> bool | None:
        """Ask the endpoint whether it parses its model's own tool-call format (see the docstring)."""
        model = await self._resolve_model()
        import openai

        try:
            card = await self._call(lambda: self._client.models.retrieve(model))
        except PolicyUnreachable as e:
            # An endpoint without GET /v1/models/{id} (or one that does not know the name: the first
            # turn then says so) does not describe its parser: treat it as unknown, use XML.
            if isinstance(e.__cause__, openai.NotFoundError):
                return None
            raise
        parser = (card.model_extra or {}).get("tool_call_parser", "unknown")
        self._native = None if parser == "unknown" else parser not in (None, "inhabit")
        return self._native

    async def next_turn(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        stop: Sequence[str] = (),
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> PolicyTurn:
        model = await self._resolve_model()
        kwargs: dict[str, Any] = {
            "model": model,
            "messages": [_wire(m) for m in messages],
            "max_tokens": max_tokens,
            "temperature": self.temperature,
        }
        if tools is not None:
            kwargs["tools"] = list(tools)
        if stop:
            kwargs["stop"] = list(stop)
        if self.logprobs:
            kwargs["logprobs"] = True
        response = await self._call(lambda: self._client.chat.completions.create(**kwargs))
        if not response.choices:
            raise InferenceError(f"{self.base_url} returned no choices")
        choice = response.choices[0]
        text = choice.message.content or ""
        calls = None
        if tools is not None:
            calls = [
                c.model_dump(include={"id", "type", "function"}) for c in choice.message.tool_calls or []
            ]
        usage = response.usage
        if usage is not None and usage.prompt_tokens:
            chars = self._chars(messages)
            self.chars_per_token = max(1.0, chars / usage.prompt_tokens)
        logprobs = None
        if choice.logprobs is not None and choice.logprobs.content:
            logprobs = [t.logprob for t in choice.logprobs.content]
        prompt_ids = _extra(response, choice, "prompt_token_ids")
        prompt_routed, routed = _routes(_extra(response, choice, "routed_experts"), prompt_ids)
        return PolicyTurn(
            text=text,
            finish_reason=choice.finish_reason or "stop",
            prompt_token_ids=prompt_ids,
            completion_token_ids=_extra(response, choice, "token_ids"),
            logprobs=logprobs,
            routed_experts=routed,
            prompt_routed_experts=prompt_routed,
            versions=_extra(response, choice, "policy_versions") or _extra(response, choice, "versions"),
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            tool_calls=calls,
            content=None if calls is None else text,
            # Ours and vLLM's reasoning parsers say `reasoning_content` (newer vLLM: `reasoning`).
            reasoning=(choice.message.model_extra or {}).get("reasoning_content")
            or (choice.message.model_extra or {}).get("reasoning"),
        )

    @staticmethod
    def _chars(messages: Sequence[Message]) -> int:
        return sum(len(m.content) + len(json.dumps(m.tool_calls or "")) for m in messages)

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None) -> int:
        chars = self._chars(messages) + (len(json.dumps(list(tools))) if tools else 0)
        return int(chars / self.chars_per_token) + _PER_MESSAGE_OVERHEAD * len(messages)

    async def close(self) -> None:
        await self._client.close()


def _wire(m: Message) -> dict[str, Any]:
    """A harness message as a chat-completions message (an assistant turn that only called tools
    has `content: null`, as the API writes it)."""
    d: dict[str, Any] = {"role": m.role, "content": m.content}
    if m.tool_calls:
        d["tool_calls"] = list(m.tool_calls)
        d["content"] = m.content or None
    if m.tool_call_id is not None:
        d["tool_call_id"] = m.tool_call_id
    return d


def _message(error: Any) -> str:
    """The server's own error message (OpenAI's {"error": {"message": ...}} shape), else the status."""
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(body.get("detail"), str):
            return body["detail"]
    return str(getattr(error, "message", error))


def _extra(response: Any, choice: Any, name: str) -> Any:
    for obj in (choice, response):
        extra = getattr(obj, "model_extra", None) or {}
        if extra.get(name) is not None:
            return extra[name]
    return None


def _routes(value: Any, prompt_ids: list[int] | None) -> tuple[list | None, list | None]:
    """(prompt routes, completion routes) from a server's `routed_experts`.

    vLLM and `inhabit serve` send base64 `.npy` of shape (N-1, layers, k) over every position but
    the last; splitting it needs the prompt length. A plain nested list is taken as completion
    routes (older servers). Anything else is dropped rather than failing the turn.
    """
    if isinstance(value, list):
        return None, value
    if isinstance(value, str) and prompt_ids is not None:
        from inhabit.inference.protocol import decode_routes

        try:
            return decode_routes(value, len(prompt_ids))
        except ValueError:
            return None, None
    return None, None
