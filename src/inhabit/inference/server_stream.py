"""Server-sent events for `inhabit serve`'s chat and completions streams, `n` choices at once.

Each choice is its own engine request (admitted together, all or none, before the first byte);
their events are merged as they come, every chunk naming its choice's `index` as OpenAI's stream
does. Each choice streams its text (held back where a stop string or a tool call may be starting),
its token ids and policy versions; the usage chunk, when asked, comes once all choices are done.
A failed choice ends the stream with an error object; however the response ends (client gone
included), every choice's engine request is aborted.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any

from fastapi.responses import StreamingResponse

from inhabit.errors import InhabitError
from inhabit.inference.chat_tools import ChatPlan
from inhabit.inference.embedded import StreamHandle, TokenEvent
from inhabit.inference.engine import Completion, GenerationRequest
from inhabit.inference.protocol import chat_logprobs, completion_logprobs, encode_routes, error_body
from inhabit.inference.reasoning import ReasoningSplit
from inhabit.inference.stops import safe_prefix


def usage(prompt: list[int], outs: Sequence[Completion]) -> dict:
    done = sum(len(c.token_ids) for c in outs)
    return {"prompt_tokens": len(prompt), "completion_tokens": done, "total_tokens": len(prompt) + done}


class ChatChunks:
    """The chunks of choice `index` of a chat stream (tool calls parsed as they complete)."""

    def __init__(
        self, rid: str, model: str, tokenizer: Any, req: Any, plan: ChatPlan | None = None, index: int = 0
    ) -> None:
        from inhabit.inference.tool_parsers import StreamingToolText

        self.rid, self.model, self.tokenizer, self.req, self.index = rid, model, tokenizer, req, index
        self.created = int(time.time())
        self.tools = (
            None if plan is None or plan.parser is None else StreamingToolText(plan.parser, plan.max_calls)
        )
        self.text_so_far = ""
        self.constrained = plan is not None and plan.guide is not None
        self.reasoning = None
        if plan is not None and plan.reasoning is not None:  # a split of its own: it keeps state
            self.reasoning = ReasoningSplit(plan.reasoning.fmt, plan.reasoning.opened)
        self.raw, self.content_so_far = "", ""

    def chunk(self, delta: dict, events: list[TokenEvent], finish: str | None, extra: dict) -> dict:
        lp = None
        if self.req.logprobs and events:
            top = [e.top_logprobs or {} for e in events] if self.req.top_logprobs else None
            lp = chat_logprobs(self.tokenizer, [e.token_id for e in events], [e.logprob for e in events], top)
        choice = {"index": self.index, "delta": delta, "logprobs": lp, "finish_reason": finish}
        choice |= {"token_ids": [e.token_id for e in events], "policy_versions": [e.version for e in events]}
        if self.req.adjusts():
            choice["sampling_adjusted"] = True
        if self.constrained:
            choice["constrained"] = True
        return {
            "id": self.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice | extra],
        }

    def first(self, prompt: list[int]) -> dict:
        first = self.chunk({"role": "assistant", "content": ""}, [], None, {})
        first["prompt_token_ids"] = prompt
        return first

    def text(self, text: str, events: list[TokenEvent], finish: str | None, extra: dict) -> dict:
        if self.reasoning is None:
            return self._answer(text, events, finish, extra)
        # Reasoning first (`delta.reasoning_content`); the content after it goes on as usual.
        self.raw += text
        if finish is None:
            new_reasoning, content = self.reasoning.feed(self.raw)
        else:
            whole, content = self.reasoning.split(self.raw)
            sent = self.reasoning.sent_reasoning
            new_reasoning = whole[len(sent) :] if whole and whole.startswith(sent) else ""
        piece = ""
        if content is not None and content.startswith(self.content_so_far):
            piece, self.content_so_far = content[len(self.content_so_far) :], content
        chunk = self._answer(piece, events, finish, extra)
        delta = chunk["choices"][0]["delta"]
        if new_reasoning:
            if delta.get("content") == "":
                del delta["content"]
            delta["reasoning_content"] = new_reasoning
        return chunk

    def _answer(self, text: str, events: list[TokenEvent], finish: str | None, extra: dict) -> dict:
        if self.tools is None:
            return self.chunk({"content": text} if text or finish is None else {}, events, finish, extra)
        # Tool calls: content streams until a call opens; each call goes out once complete.
        self.text_so_far += text
        if finish is None:
            content, calls = self.tools.feed(self.text_so_far)
        else:
            content, calls = self.tools.finish(self.text_so_far)
            if self.tools.sent_calls and finish == "stop":
                finish = "tool_calls"
        delta: dict[str, Any] = {"content": content} if content else {}
        if calls:
            first = self.tools.sent_calls - len(calls)
            delta["tool_calls"] = [c.wire() | {"index": first + k} for k, c in enumerate(calls)]
        return self.chunk(delta, events, finish, extra)

    def usage(self, prompt: list[int], outs: Sequence[Completion]) -> dict | None:
        if not (self.req.stream_options and self.req.stream_options.include_usage):
            return None
        body = self.chunk({}, [], None, {})
        body["choices"] = []
        body["usage"] = usage(prompt, outs)
        return body


class CompletionChunks(ChatChunks):
    """The chunks of choice `index` of a (legacy) completions stream."""

    def chunk(self, delta: dict, events: list[TokenEvent], finish: str | None, extra: dict) -> dict:
        lp = None
        if self.req.logprobs is not None and events:
            top = [e.top_logprobs or {} for e in events] if self.req.logprobs else None
            lp = completion_logprobs(
                self.tokenizer,
                [e.token_id for e in events],
                [e.logprob for e in events],
                top,
                as_ids=self.req.return_tokens_as_token_ids,
            )
        text = delta.get("content", "")
        choice = {"index": self.index, "text": text, "logprobs": lp, "finish_reason": finish}
        choice |= {"token_ids": [e.token_id for e in events], "policy_versions": [e.version for e in events]}
        if self.req.adjusts():
            choice["sampling_adjusted"] = True
        return {
            "id": self.rid,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [choice | extra],
        }

    def first(self, prompt: list[int]) -> dict | None:
        return None


class Stream(StreamingResponse):
    """An SSE response that aborts its engine requests however the response ends (a client
    gone before the first byte included, when the body iterator never even starts)."""

    def __init__(self, body: AsyncIterator[str], handles: StreamHandle | Sequence[StreamHandle]) -> None:
        super().__init__(body, media_type="text/event-stream")
        self.handles = [handles] if isinstance(handles, StreamHandle) else list(handles)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            for h in self.handles:
                h.cancel()


_END = object()


def sse(
    handles: Sequence[StreamHandle],
    gen: GenerationRequest,
    fmts: Sequence[Any],
    tokenizer: Any,
    stops: tuple[str, ...],
) -> Stream:
    """The SSE response of `handles` (one per choice, formatted by `fmts[i]`), ending `[DONE]`."""

    async def pump(i: int, out: asyncio.Queue) -> None:
        """Choice i's chunks into `out`, then its Completion (or an error body), then _END."""
        fmt, ids, sent, pending = fmts[i], [], "", []
        try:
            async for ev in handles[i]:
                if isinstance(ev, TokenEvent):
                    ids.append(ev.token_id)
                    pending.append(ev)
                    text = tokenizer.decode(ids, skip_special_tokens=True)
                    cut = min((k for k in (text.find(s) for s in stops) if k >= 0), default=-1)
                    safe = safe_prefix(text[:cut] if cut >= 0 else text, stops, finished=False)
                    if len(safe) > len(sent) and safe.startswith(sent):
                        await out.put(fmt.text(safe[len(sent) :], pending, None, {}))
                        sent, pending = safe, []
                    continue
                c: Completion = ev
                if c.finish_reason == "error":
                    await out.put(error_body(f"generation failed: {c.error}", "server_error"))
                    break
                rest = c.text[len(sent) :] if c.text.startswith(sent) else ""
                await out.put(fmt.text(rest, pending, c.finish_reason, {"routed_experts": encode_routes(c)}))
                await out.put(c)
        except InhabitError as e:
            await out.put(error_body(str(e), "server_error"))
        finally:
            await out.put(_END)

    async def events() -> AsyncIterator[str]:
        out: asyncio.Queue = asyncio.Queue()
        for fmt in fmts:
            if (first := fmt.first(gen.prompt_token_ids)) is not None:
                yield data(first)
        tasks = [asyncio.ensure_future(pump(i, out)) for i in range(len(handles))]
        done: list[Completion] = []
        try:
            running = len(tasks)
            while running:
                item = await out.get()
                if item is _END:
                    running -= 1
                elif isinstance(item, Completion):
                    done.append(item)
                else:
                    yield data(item)
                    if "error" in item:
                        break
            else:
                if (body := fmts[0].usage(gen.prompt_token_ids, done)) is not None:
                    yield data(body)
        finally:
            for t in tasks:
                t.cancel()
        yield "data: [DONE]\n\n"

    return Stream(events(), handles)


def data(obj: dict) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"
