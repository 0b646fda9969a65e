"""`POST /v1/responses`: the subset of OpenAI's Responses API that agent SDKs use, over the same
engine, chat-template rendering and tool-call parsers as `/v1/chat/completions`.

A request is translated into a chat request and planned by chat_tools.py, so the prompt the model
sees is token for token the one the equivalent chat request gets:

- `instructions` becomes a leading system message; `input` is a string (one user message) or a list
  of items: messages (`user`, `system`, `developer`, `assistant`; `content` a string or
  `input_text`/`output_text` parts), `function_call` items (consecutive ones join the assistant
  turn before them, as parallel calls), `function_call_output` items (a `tool` message) and
  `reasoning` items (an earlier answer's reasoning: the `reasoning_content` of the assistant turn
  after it, which templates such as Qwen3's render for the turns after the last user message).
- `tools`: function tools (`{"type": "function", "name", "parameters", ...}`); `tool_choice`
  `auto`, `none`, `required` or `{"type": "function", "name"}` (the last two constrained, as in
  chat); `parallel_tool_calls`; `max_output_tokens`, `temperature`, `top_p`, `top_logprobs`;
  `include: ["message.output_text.logprobs"]`; `text.format` `json_schema` (or `json_object`)
  constrains decoding as chat's `response_format` does.
- Stateless: nothing is stored (the response says `"store": false` whatever was asked), so
  `previous_response_id` and `conversation` answer 400: send the whole conversation as `input`.
- Output items: a `message` with one `output_text` part for the text outside calls, then a
  `function_call` item per parsed call. A response cut by `max_output_tokens` has status
  `incomplete`.
- Streaming sends the events OpenAI's SDK consumes: `response.created`, `response.in_progress`,
  `response.output_item.added`, `response.content_part.added`, `response.output_text.delta`,
  `response.output_text.done`, `response.content_part.done`, `response.function_call_arguments
  .delta`/`.done`, `response.output_item.done`, then `response.completed` (or
  `response.incomplete`, or `response.failed` when generation fails). With a reasoning parser the
  reasoning comes first as its own `reasoning` item (`response.output_item.added`,
  `response.content_part.added` of a `reasoning_text` part, `response.reasoning_text.delta`/
  `.done`, `response.content_part.done`, `response.output_item.done`), then the answer as above.

RL extensions on the response object (and on the final streamed one): `prompt_token_ids`,
`token_ids`, `token_logprobs` (each generated token's logprob, calls included), `policy_versions`,
`routed_experts` (protocol.py describes them).
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from fastapi import Depends, FastAPI, Request
from pydantic import Field, ValidationError

from inhabit.errors import InhabitError
from inhabit.inference.chat_tools import BadChatRequest, ChatPlan, assistant_message
from inhabit.inference.embedded import TokenEvent
from inhabit.inference.engine import Completion, GenerationRequest
from inhabit.inference.protocol import ChatRequest, Seed, Text, _Lenient, chat_logprobs, encode_routes
from inhabit.inference.reasoning import ReasoningSplit

LOGPROBS_INCLUDE = "message.output_text.logprobs"


class ResponsesRequest(_Lenient):
    model: str
    input: Text | list[dict[str, Any]]
    instructions: Text | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    max_output_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_logprobs: int | None = Field(None, ge=0, le=20)
    include: list[str] | None = None
    stream: bool = False
    store: bool | None = None
    previous_response_id: str | None = None
    conversation: Any = None
    text: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    seed: Seed | None = None  # an extension, as in chat

    def wants_logprobs(self) -> bool:
        return LOGPROBS_INCLUDE in (self.include or []) or bool(self.top_logprobs)


def to_chat(req: ResponsesRequest) -> tuple[ChatRequest, list[str]]:
    """The chat request this Responses request means, and where each of its messages came from
    (`instructions`, `input.3`), to name the param of a 400 found in the chat messages."""
    if req.previous_response_id is not None or req.conversation is not None:
        raise BadChatRequest(
            "this server stores no responses or conversations (it answers as with store: false): "
            "send the whole conversation as `input` instead of previous_response_id/conversation",
            "previous_response_id" if req.previous_response_id is not None else "conversation",
        )
    fmt = (req.text or {}).get("format") or {}
    response_format = None
    if fmt.get("type", "text") == "json_schema":  # Responses flattens what chat nests
        spec = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        response_format = {"type": "json_schema", "json_schema": spec}
    elif fmt.get("type", "text") == "json_object":
        response_format = {"type": "json_object"}
    elif fmt.get("type", "text") != "text":
        raise BadChatRequest(
            f"text.format type {fmt.get('type')!r} is not supported (text, json_object, json_schema)",
            "text.format",
        )
    messages: list[dict[str, Any]] = []
    origins: list[str] = []
    if req.instructions:
        messages.append({"role": "system", "content": req.instructions})
        origins.append("instructions")
    items = [{"role": "user", "content": req.input}] if isinstance(req.input, str) else req.input
    joinable = False  # may a function_call join the last message (an assistant turn)?
    thought: str | None = None  # a reasoning item's text, for the assistant turn after it
    for i, item in enumerate(items):
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise BadChatRequest(f"input[{i}] has role {role!r}", f"input.{i}.role")
            messages.append({"role": role, "content": _text(item.get("content"), i)})
            origins.append(f"input.{i}")
            if role == "assistant" and thought is not None:
                messages[-1]["reasoning_content"] = thought
            thought = None
            joinable = role == "assistant"
        elif kind == "reasoning":  # a thinking model's earlier reasoning: the next assistant turn's
            thought = _reasoning_text(item, i)
            joinable = False
        elif kind == "function_call":
            call = {
                "id": _field(item, "call_id", i),
                "type": "function",
                "function": {"name": _field(item, "name", i), "arguments": _field(item, "arguments", i)},
            }
            if not joinable:
                messages.append({"role": "assistant", "content": None, "tool_calls": []})
                origins.append(f"input.{i}")
                if thought is not None:
                    messages[-1]["reasoning_content"] = thought
                thought = None
            last = messages[-1]
            if last.get("content") == "":
                last["content"] = None
            last.setdefault("tool_calls", []).append(call)
            joinable = True
        elif kind == "function_call_output":
            output = item.get("output")
            text = output if isinstance(output, str) else _text(output, i)
            messages.append({"role": "tool", "tool_call_id": _field(item, "call_id", i), "content": text})
            origins.append(f"input.{i}")
            joinable, thought = False, None
        else:
            raise BadChatRequest(
                f"input[{i}] is a {kind!r} item; this server reads messages, reasoning, function_call "
                "and function_call_output items",
                f"input.{i}.type",
            )
    body: dict[str, Any] = {
        "model": req.model,
        "messages": messages,
        "tools": _tools(req.tools) if req.tools else None,
        "tool_choice": _tool_choice(req.tool_choice),
        "parallel_tool_calls": True if req.parallel_tool_calls is None else req.parallel_tool_calls,
        "response_format": response_format,
        "temperature": 1.0 if req.temperature is None else req.temperature,
        "top_p": 1.0 if req.top_p is None else req.top_p,
        "max_tokens": req.max_output_tokens,
        "logprobs": req.wants_logprobs(),
        "top_logprobs": req.top_logprobs,
        "seed": req.seed,
    }
    try:
        return ChatRequest.model_validate(body), origins
    except ValidationError as e:
        err = e.errors()[0]
        loc = [str(p) for p in err["loc"]]
        field = {"messages": "input", "max_tokens": "max_output_tokens"}.get(loc[0] if loc else "", "")
        rest = [p for p in loc[1:] if p.isidentifier() or p.isdigit()]  # not union-variant tags
        param = ".".join([field or (loc[0] if loc else "input"), *rest])
        raise BadChatRequest(f"{param}: {err['msg']}", param) from None


def _input_param(param: str | None, origins: list[str]) -> str | None:
    """A chat param (`messages.4.tool_call_id`) as the Responses input item it came from."""
    if param == "response_format":
        return "text.format"
    parts = (param or "").split(".")
    if parts[0] == "messages" and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) < len(origins):
        return origins[int(parts[1])]
    return param


def _field(item: dict, key: str, i: int) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise BadChatRequest(f"input[{i}] ({item.get('type')}) needs a string {key!r}", f"input.{i}.{key}")
    return value


def _reasoning_text(item: dict, i: int) -> str:
    """A reasoning item's text: its `reasoning_text` parts, else its summary's `summary_text`."""
    parts = item.get("content") or item.get("summary") or []
    if not isinstance(parts, list) or not all(
        isinstance(p, dict) and isinstance(p.get("text"), str) for p in parts
    ):
        raise BadChatRequest(f"input[{i}] (reasoning) needs a list of text parts", f"input.{i}.content")
    return "\n".join(p["text"] for p in parts)


def _text(content: Any, i: int) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadChatRequest(f"input[{i}].content must be a string or a list of text parts", f"input.{i}")
    out = []
    for j, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in ("input_text", "output_text", "text") or not isinstance(part.get("text"), str):
            raise BadChatRequest(
                f"input[{i}].content[{j}] is a {kind!r} part; this server reads text parts only "
                "(input_text, output_text)",
                f"input.{i}.content.{j}",
            )
        out.append(part["text"])
    return "".join(out)


def _tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, t in enumerate(tools):
        if t.get("type") != "function":
            raise BadChatRequest(
                f"tools[{i}] is a {t.get('type')!r} tool; this server runs function tools only", f"tools.{i}"
            )
        fn = {k: t[k] for k in ("name", "description", "parameters", "strict") if t.get(k) is not None}
        out.append({"type": "function", "function": fn})
    return out


def _tool_choice(choice: str | dict[str, Any] | None) -> Any:
    if choice is None or isinstance(choice, str):
        return choice
    if choice.get("type") == "function" and isinstance(choice.get("name"), str):
        return {"type": "function", "function": {"name": choice["name"]}}
    raise BadChatRequest(
        f"tool_choice {choice!r} is not supported: use auto, none, required or a function", "tool_choice"
    )


# ------------------------------------------------------------------ output


def _message_item(text: str, logprobs: list | None, status: str = "completed") -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}
    return {
        "type": "message",
        "id": f"msg_{uuid.uuid4().hex}",
        "role": "assistant",
        "status": status,
        "content": [part] if status == "completed" else [],
    }


def _call_item(call_id: str, name: str, arguments: str, status: str = "completed") -> dict[str, Any]:
    return {
        "type": "function_call",
        "id": f"fc_{uuid.uuid4().hex}",
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
        "status": status,
    }


class _Shape:
    """The response object around the output items (the same for streamed and whole answers)."""

    def __init__(self, req: ResponsesRequest, model: str) -> None:
        self.req, self.model = req, model
        self.id, self.created = f"resp_{uuid.uuid4().hex}", int(time.time())

    def body(self, status: str, output: list[dict], c: Completion | None = None) -> dict[str, Any]:
        r = self.req
        out: dict[str, Any] = {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": r.instructions,
            "max_output_tokens": r.max_output_tokens,
            "model": self.model,
            "output": [{k: v for k, v in o.items() if not k.startswith("_")} for o in output],
            "parallel_tool_calls": r.parallel_tool_calls is not False,
            "previous_response_id": None,
            "store": False,
            "temperature": 1.0 if r.temperature is None else r.temperature,
            "top_p": 1.0 if r.top_p is None else r.top_p,
            "top_logprobs": r.top_logprobs,
            "text": {"format": (r.text or {}).get("format") or {"type": "text"}},
            "tool_choice": r.tool_choice or "auto",
            "tools": r.tools or [],
            "truncation": "disabled",
            "metadata": r.metadata or {},
            "usage": None,
        }
        if c is not None:
            prompt = c.prompt_token_ids or []
            out["usage"] = {
                "input_tokens": len(prompt),
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": len(c.token_ids),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": len(prompt) + len(c.token_ids),
            }
            out |= {
                "prompt_token_ids": prompt,
                "token_ids": c.token_ids,
                "token_logprobs": c.logprobs,
                "policy_versions": c.versions,
                "routed_experts": encode_routes(c),
            }
        return out


def whole_output(plan: ChatPlan, c: Completion, logprobs: list | None) -> list[dict[str, Any]]:
    message, _ = assistant_message(plan, c.text, c.finish_reason)
    items = []
    if message.get("reasoning_content"):
        items.append(_reasoning_item(message["reasoning_content"]))
    if message.get("content"):
        items.append(_message_item(message["content"], logprobs))
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        items.append(_call_item(call["id"], fn["name"], fn["arguments"]))
    return items


def _reasoning_item(text: str) -> dict[str, Any]:
    return {
        "type": "reasoning",
        "id": f"rs_{uuid.uuid4().hex}",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": text}],
        "status": "completed",
    }


def _status(finish: str) -> str:
    return "incomplete" if finish == "length" else "completed"


# ------------------------------------------------------------------ the route


def install(
    app: FastAPI,
    engine: Any,
    tokenizer: Any,
    *,
    model_name: str,
    tool_call_parser: str | None,
    xml_tools: bool = False,
    reasoning_parser: str | None = None,
    auth: Callable[..., None],
    check_model: Callable[[str], None],
    budget: Callable[[int, int | None, str], int],
    refuse_long_text: Callable[[list[str], str], None],
    api_error: type[Exception],
    checked: Callable[[list[Completion]], list[Completion]],
    stream_response: Callable[..., Any],
) -> None:
    """Add `POST /v1/responses` to `app`, with the same auth, limits and admission as chat."""
    from inhabit.inference.chat_tools import attach_reasoning, encode_plan, plan_chat
    from inhabit.inference.server_limits import until_disconnected

    @app.post("/v1/responses", dependencies=[Depends(auth)])
    async def responses(req: ResponsesRequest, request: Request) -> Any:
        check_model(req.model)
        origins: list[str] = []
        try:
            chat, origins = to_chat(req)
            plan = plan_chat(chat, tool_call_parser, xml_tools)
            refuse_long_text([m["content"] or "" for m in plan.messages], "input")
            prompt = await asyncio.to_thread(encode_plan, tokenizer, plan)
        except BadChatRequest as e:
            raise api_error(400, str(e), param=_input_param(e.param, origins)) from None
        attach_reasoning(plan, reasoning_parser, tokenizer, prompt)
        max_tokens = budget(len(prompt), req.max_output_tokens, "max_output_tokens")
        sp = replace(chat.sampling(max_tokens), guide=plan.guide)
        gen = GenerationRequest(prompt, sp)
        shape = _Shape(req, model_name)
        if req.stream:
            handle = engine.open_stream(gen)  # admission (429) is decided here, before any byte
            return stream_response(_events(handle, plan, shape, tokenizer, req.wants_logprobs()), handle)
        (c,) = checked(await until_disconnected(request, engine.generate([gen])))
        lps = _logprobs(tokenizer, c.token_ids, c.logprobs, c.top_logprobs, req)
        return shape.body(_status(c.finish_reason), whole_output(plan, c, lps), c)


def _logprobs(
    tokenizer: Any, ids: list[int], lps: list[float], top: Any, req: ResponsesRequest
) -> list | None:
    if not req.wants_logprobs():
        return None
    return chat_logprobs(tokenizer, ids, lps, top if req.top_logprobs else None)["content"]


async def _events(
    handle: Any, plan: ChatPlan, shape: _Shape, tokenizer: Any, want_lps: bool
) -> AsyncIterator[str]:
    """The Responses event stream of one generation (see the module docstring for the order)."""
    from inhabit.inference.tool_parsers import StreamingToolText

    seq = 0
    output: list[dict[str, Any]] = []
    msg: dict[str, Any] | None = None  # the message item being streamed
    text_so_far = sent = ""
    ids: list[int] = []
    pending: list[TokenEvent] = []
    tools = None if plan.parser is None else StreamingToolText(plan.parser, plan.max_calls)
    # A split of its own (it keeps what it has sent); the answer so far, and its content so far.
    split = None if plan.reasoning is None else ReasoningSplit(plan.reasoning.fmt, plan.reasoning.opened)
    raw, content_so_far = "", ""
    thought: dict[str, Any] | None = None  # the reasoning item being streamed

    def event(kind: str, **fields: Any) -> str:
        nonlocal seq
        seq += 1
        body = {"type": kind, "sequence_number": seq - 1} | fields
        return f"event: {kind}\ndata: {json.dumps(body, separators=(',', ':'))}\n\n"

    def where(item: dict) -> dict:
        return {"item_id": item["id"], "output_index": output.index(item)}

    def text_events(delta: str, events: list[TokenEvent]) -> list[str]:
        nonlocal msg
        out = []
        if msg is None:
            msg = _message_item("", None, "in_progress")
            output.append(msg)
            out.append(event("response.output_item.added", output_index=len(output) - 1, item=msg))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(event("response.content_part.added", **where(msg), content_index=0, part=part))
            msg["_text"], msg["_lps"] = "", []
        lps = []
        if want_lps and events:
            top = [e.top_logprobs or {} for e in events]
            lps = chat_logprobs(tokenizer, [e.token_id for e in events], [e.logprob for e in events], top)
            lps = lps["content"]
        msg["_text"] += delta
        msg["_lps"] += lps
        out.append(
            event("response.output_text.delta", **where(msg), content_index=0, delta=delta, logprobs=lps)
        )
        return out

    def close_message() -> list[str]:
        nonlocal msg
        if msg is None:
            return []
        text, lps = msg.pop("_text"), msg.pop("_lps")
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": lps}
        msg |= {"status": "completed", "content": [part]}
        out = [
            event("response.output_text.done", **where(msg), content_index=0, text=text, logprobs=lps),
            event("response.content_part.done", **where(msg), content_index=0, part=part),
            event("response.output_item.done", output_index=output.index(msg), item=msg),
        ]
        msg = None
        return out

    def call_events(calls: list) -> list[str]:
        out = close_message()
        for call in calls:
            item = _call_item(call.id, call.name, "", "in_progress")
            output.append(item)
            out.append(event("response.output_item.added", output_index=len(output) - 1, item=item))
            out.append(event("response.function_call_arguments.delta", **where(item), delta=call.arguments))
            item |= {"arguments": call.arguments, "status": "completed"}
            out.append(
                event("response.function_call_arguments.done", **where(item), arguments=call.arguments)
            )
            out.append(event("response.output_item.done", output_index=output.index(item), item=item))
        return out

    def reasoning_events(delta: str) -> list[str]:
        nonlocal thought
        out = []
        if thought is None:
            thought = _reasoning_item("")
            thought |= {"content": [], "status": "in_progress", "_text": ""}
            output.append(thought)
            out.append(event("response.output_item.added", output_index=len(output) - 1, item=thought))
            part = {"type": "reasoning_text", "text": ""}
            out.append(event("response.content_part.added", **where(thought), content_index=0, part=part))
        thought["_text"] += delta
        out.append(event("response.reasoning_text.delta", **where(thought), content_index=0, delta=delta))
        return out

    def close_reasoning() -> list[str]:
        nonlocal thought
        if thought is None:
            return []
        part = {"type": "reasoning_text", "text": thought.pop("_text")}
        thought |= {"status": "completed", "content": [part]}
        out = [
            event("response.reasoning_text.done", **where(thought), content_index=0, text=part["text"]),
            event("response.content_part.done", **where(thought), content_index=0, part=part),
            event("response.output_item.done", output_index=output.index(thought), item=thought),
        ]
        thought = None
        return out

    def new_answer(delta: str, events: list[TokenEvent], final: bool) -> list[str]:
        """The reasoning parser's stage: reasoning becomes its own item, the content after it goes
        on to `new_text` (calls are parsed from the content alone, as in the whole answer)."""
        nonlocal raw, content_so_far
        if split is None:
            return new_text(delta, events, final)
        raw += delta
        if final:
            whole, content = split.split(raw)
            sent_reasoning = split.sent_reasoning
            thinking = whole[len(sent_reasoning) :] if whole and whole.startswith(sent_reasoning) else ""
        else:
            thinking, content = split.feed(raw)
        out = reasoning_events(thinking) if thinking else []
        if content is None:
            return out
        out += close_reasoning()
        piece = ""
        if content.startswith(content_so_far):
            piece, content_so_far = content[len(content_so_far) :], content
        # At the end the tool parser flushes what it held; with no content there is no message.
        return out + (new_text(piece, events, final) if piece or (final and tools is not None) else [])

    def new_text(delta: str, events: list[TokenEvent], final: bool) -> list[str]:
        nonlocal text_so_far
        if tools is None:
            return text_events(delta, events) if delta or events else []
        text_so_far += delta
        content, calls = (tools.finish if final else tools.feed)(text_so_far)
        if not final and tools.sent_calls == 0 and not calls:
            return text_events(content, events) if content else []
        out = text_events(content, events) if content.strip() or (content and msg is not None) else []
        return out + call_events(calls)

    yield event("response.created", response=shape.body("in_progress", []))
    yield event("response.in_progress", response=shape.body("in_progress", []))
    try:
        async for ev in handle:
            if isinstance(ev, TokenEvent):
                ids.append(ev.token_id)
                pending.append(ev)
                text = tokenizer.decode(ids, skip_special_tokens=True)
                if len(text) > len(sent) and text.startswith(sent) and not text.endswith("\ufffd"):
                    for e in new_answer(text[len(sent) :], pending, False):
                        yield e
                    sent, pending = text, []
                continue
            c: Completion = ev
            if c.finish_reason == "error":
                body = shape.body("failed", output)
                body["error"] = {"code": "server_error", "message": f"generation failed: {c.error}"}
                yield event("response.failed", response=body)
                return
            rest = c.text[len(sent) :] if c.text.startswith(sent) else ""
            for e in new_answer(rest, pending, True) + close_reasoning() + close_message():
                yield e
            status = _status(c.finish_reason)
            yield event(f"response.{status}", response=shape.body(status, output, c))
    except InhabitError as e:
        body = shape.body("failed", output)
        body["error"] = {"code": "server_error", "message": str(e)}
        yield event("response.failed", response=body)
