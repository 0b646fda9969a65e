"""Wire types of the OpenAI-compatible server, and the RL extension fields it adds.

Requests follow OpenAI's chat and (legacy) completions APIs. Unknown fields are ignored (clients
send many); fields we cannot honour (echo, `best_of` above `n`) are refused with a 400 when set to
a non-default value, never silently dropped. `response_format` (json_object, json_schema) is
enforced by constrained decoding (constrained.py). `presence_penalty`,
`frequency_penalty` and `logit_bias` are applied by the sampler (sampling.py); the logprobs then
describe the adjusted distribution actually sampled, and each choice says so with
`"sampling_adjusted": true`. Chat messages may be `developer` (read
as `system`), `tool` (answering an assistant's `tool_calls` by `tool_call_id`), and give `content`
as a list of text parts; `tools`, `tool_choice` and `parallel_tool_calls` are checked and rendered
in chat_tools.py.

Extensions on every choice (named as vLLM names them, so one client reads both servers):
- `token_ids`: completion token ids; `prompt_token_ids`: the prompt as the model saw it,
- `routed_experts`: base64 of a `.npy` int array (N-1, layers, k) for MoE models, the experts
  each position 0..N-2 of prompt+completion was routed to (vLLM's layout: the last sampled token
  was never fed to the model, so it has none),
- `policy_versions`: the policy version that produced each completion token (ours only),
- `sampling_adjusted` (only when true): penalties or logit bias changed the logits sampled from, so
  `logprobs` are not the model's own and a trainer recomputing them from the weights will not
  reproduce them (token ids, routes and versions stay exact).
- `constrained` (only when true): a grammar masked the tokens drawn (response_format, a forced
  tool call); `logprobs` are still the model's own, but the tokens were not drawn from them.
"""

from __future__ import annotations

import base64
import io
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, StrictInt

from inhabit.inference.engine import Completion, SamplingParams


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="ignore")


def _utf8(text: str) -> str:
    """JSON may carry lone surrogates ("\\ud800") that no tokenizer can encode: refuse them (400)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"the text holds an unpaired surrogate at position {e.start}: send valid UTF-8 text"
        ) from None
    return text


Text = Annotated[str, AfterValidator(_utf8)]
# torch seeds are unsigned 64-bit; the server adds the choice index (n <= 64) to the seed.
Seed = Annotated[int, Field(ge=0, le=2**63 - 1)]


class ContentPart(_Lenient):
    type: str
    text: Text | None = None


class FunctionCall(_Lenient):
    name: str
    arguments: str  # a JSON object, as text (OpenAI's wire form)


class ToolCallIn(_Lenient):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None
    reasoning_content: Text | None = None  # an assistant turn's reasoning, for templates that render it

    def text(self) -> str:
        """The content as one string (text parts joined); chat_tools.py refuses other parts first."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content)


class FunctionSpec(_Lenient):
    name: str = Field(..., pattern=r"^[A-Za-z0-9_-]{1,64}$")
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ToolSpec(_Lenient):
    type: Literal["function"]
    function: FunctionSpec


class _Named(_Lenient):
    name: str


class NamedToolChoice(_Lenient):
    type: Literal["function"]
    function: _Named


class StreamOptions(_Lenient):
    include_usage: bool = False


class _Common(_Lenient):
    # Counts and switches are strict: `max_tokens: true` or `stream: "yes"` is a 400, not a guess.
    model: str
    max_tokens: StrictInt | None = Field(None, ge=1)
    temperature: float = Field(1.0, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    n: StrictInt = Field(1, ge=1, le=64)
    stop: Text | list[Text] | None = None
    seed: Seed | None = None
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(0.0, ge=-2.0, le=2.0)
    logit_bias: (
        dict[Annotated[str, Field(pattern=r"^\d+$")], Annotated[float, Field(ge=-100, le=100)]] | None
    ) = None
    # vLLM-style extensions.
    stop_token_ids: list[int] | None = None
    return_token_ids: bool = True
    skip_special_tokens: bool = True

    def unsupported(self) -> str | None:
        return None

    def adjusts(self) -> bool:
        """Do penalties or a logit bias change the distribution sampled from?"""
        return bool(self.presence_penalty or self.frequency_penalty or self.logit_bias)

    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: StrictInt | None = Field(None, ge=1)
    logprobs: StrictBool = False
    top_logprobs: StrictInt | None = Field(None, ge=0, le=20)
    tools: list[ToolSpec] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    # Enforced by constrained decoding (chat_tools.plan_chat makes the guide; 400 when unknown).
    response_format: dict[str, Any] | None = None

    def sampling(self, default_max: int, index: int = 0) -> SamplingParams:
        return _sampling(
            self, self.max_completion_tokens or self.max_tokens or default_max, self.top_logprobs or 0, index
        )


class CompletionRequest(_Common):
    prompt: Text | list[int] | list[Text] | list[list[int]]
    logprobs: StrictInt | None = Field(None, ge=0, le=20)
    echo: StrictBool = False
    best_of: StrictInt | None = Field(None, ge=1)
    return_tokens_as_token_ids: bool = False
    max_tokens: StrictInt | None = Field(16, ge=1)
    # vLLM's constrained decoding: {"json": schema} | {"json_object": true} | {"grammar": ebnf}.
    structured_outputs: dict[str, Any] | None = None

    def unsupported(self) -> str | None:
        if self.echo:
            return "echo is not supported"
        if self.best_of is not None and self.best_of != self.n:
            # best_of = n is plain sampling; more would need scoring candidates, which we do not do.
            return f"best_of={self.best_of} is not supported (only best_of equal to n={self.n})"
        return super().unsupported()

    def sampling(self, default_max: int, index: int = 0) -> SamplingParams:
        return _sampling(self, self.max_tokens or default_max, self.logprobs or 0, index)


class LoadWeightsRequest(_Lenient):
    path: str = Field(
        ..., min_length=1, description="A model folder or .safetensors file on the server's machine."
    )
    version: StrictInt = Field(..., ge=0)


def _sampling(req: _Common, max_tokens: int, top_logprobs: int, index: int) -> SamplingParams:
    return SamplingParams(
        temperature=req.temperature,
        top_p=req.top_p,
        max_tokens=max_tokens,
        stop=req.stops(),
        stop_token_ids=tuple(req.stop_token_ids or ()),
        seed=None if req.seed is None else req.seed + index,
        top_logprobs=top_logprobs,
        presence_penalty=req.presence_penalty,
        frequency_penalty=req.frequency_penalty,
        logit_bias=tuple((int(t), b) for t, b in (req.logit_bias or {}).items()),
    )


def error_body(message: str, type_: str, param: str | None = None, code: str | None = None) -> dict:
    """OpenAI's error object."""
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


# ------------------------------------------------------------------ routed experts on the wire


def encode_routes(c: Completion) -> str | None:
    """vLLM's routed_experts: base64 .npy of (N-1, layers, k) for positions 0..N-2."""
    if not c.routed_experts or c.prompt_routed_experts is None:
        return None
    arr = np.asarray(list(c.prompt_routed_experts) + list(c.routed_experts), dtype=np.int32)
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def decode_routes(data: str | None, prompt_len: int) -> tuple[list | None, list | None]:
    """(prompt_routed_experts, routed_experts) from vLLM-style base64 .npy (N-1, layers, k)."""
    if not data:
        return None, None
    arr = np.load(io.BytesIO(base64.b64decode(data)), allow_pickle=False).astype(np.int64)
    split = max(prompt_len - 1, 0)
    return arr[:split].tolist(), arr[split:].tolist()


# ------------------------------------------------------------------ logprobs on the wire


def token_strings(tokenizer: Any, ids: list[int], as_ids: bool = False) -> list[str]:
    """Each token as text, or as vLLM's "token_id:N" form (exact even for partial UTF-8 bytes)."""
    if as_ids or tokenizer is None:
        return [f"token_id:{i}" for i in ids]
    return [tokenizer.decode([i]) for i in ids]


def chat_logprobs(
    tokenizer: Any, ids: list[int], lps: list[float], top: list[dict[int, float]] | None
) -> dict:
    """OpenAI chat `logprobs`: {"content": [{token, logprob, bytes, top_logprobs}]}."""
    content = []
    for j, (tok, lp) in enumerate(zip(token_strings(tokenizer, ids), lps, strict=True)):
        alts = []
        if top is not None:
            for tid, tlp in top[j].items():
                s = token_strings(tokenizer, [tid])[0]
                alts.append({"token": s, "logprob": tlp, "bytes": list(s.encode())})
        content.append({"token": tok, "logprob": lp, "bytes": list(tok.encode()), "top_logprobs": alts})
    return {"content": content}


def completion_logprobs(
    tokenizer: Any,
    ids: list[int],
    lps: list[float],
    top: list[dict[int, float]] | None,
    offset: int = 0,
    as_ids: bool = False,
) -> dict:
    """OpenAI completions `logprobs`: tokens, token_logprobs, top_logprobs, text_offset."""
    toks = token_strings(tokenizer, ids, as_ids)
    offsets, pos = [], offset
    for t in toks:
        offsets.append(pos)
        pos += len(t)
    tops = None
    if top is not None:
        tops = [{token_strings(tokenizer, [tid], as_ids)[0]: tlp for tid, tlp in d.items()} for d in top]
    return {"tokens": toks, "token_logprobs": list(lps), "top_logprobs": tops, "text_offset": offsets}
