"""What keeps `inhabit serve` answering under hostile or careless clients.

- `BodyCap`: a plain ASGI middleware that refuses a request body past `max_request_bytes` with
  413 while it streams in (a declared Content-Length past the cap is refused before any byte is
  read), so a huge body is never buffered or parsed. `/v1/load_weights` has its own, larger cap.
- `PromptBound`: a lower bound on a text's token count from its UTF-8 length (no token of the
  vocabulary is longer than its longest entry), so a prompt that cannot fit the context is
  refused before it is tokenized; tokenization of the rest runs off the event loop.
- `until_disconnected`: races a request's work against its client going away, so a
  non-streaming request whose client hung up stops generating at the engine's next step.
- `ErrorJSON`: error bodies are encoded as ASCII JSON, so text a client sent (a lone surrogate
  included) can never make the error itself fail to encode.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse

from inhabit.inference.protocol import error_body
from inhabit.serving import cap_body, client_disconnected, send_json

T = TypeVar("T")


class ErrorJSON(JSONResponse):
    """A JSON response rendered with `ensure_ascii=True` (any Python str encodes)."""

    def render(self, content: Any) -> bytes:
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def too_large(cap: int) -> dict:
    return error_body(
        f"the request body exceeds this server's cap of {cap} bytes (serve --set max_request_bytes=N)",
        "invalid_request_error",
        code="payload_too_large",
    )


class BodyCap:
    """413 (an OpenAI error object) for bodies past `cap`, except on the paths in `exempt`."""

    def __init__(self, app: Any, cap: int, exempt: tuple[str, ...] = ()) -> None:
        self.app, self.cap, self.exempt = app, cap, exempt

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"].rstrip("/") in self.exempt:
            await self.app(scope, receive, send)
            return
        for k, v in scope["headers"]:
            if k.lower() == b"content-length" and v.isdigit() and int(v) > self.cap:
                await send_json(send, 413, too_large(self.cap))
                return
        await self.app(scope, cap_body(receive, self.cap, too_large(self.cap)), send)


class PromptBound:
    """At least how many tokens a text becomes: its UTF-8 bytes over the longest vocabulary entry.

    A vocabulary entry's own UTF-8 spelling is never shorter than the bytes it stands for (byte-
    level BPE spells a byte as one or two characters, sentencepiece spells a space as '▁' and a
    byte as '<0x0A>'), so the bound holds for the tokenizers in use; special tokens a chat
    template adds only make the real count larger.
    """

    def __init__(self, tokenizer: Any) -> None:
        vocab = tokenizer.get_vocab() if tokenizer is not None else {}
        self.max_token_bytes = max((len(k.encode("utf-8", "surrogatepass")) for k in vocab), default=1)

    def at_least(self, texts: list[str]) -> int:
        # Lone surrogates are refused by validation before this point; surrogatepass keeps it total.
        total = sum(len(t.encode("utf-8", "surrogatepass")) for t in texts)
        return -(-total // self.max_token_bytes)


async def until_disconnected(request: Request, work: Awaitable[T]) -> T:
    """Await `work`; if the client disconnects first, cancel it (the engine aborts the request)."""
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(client_disconnected(request))
    try:
        done, _ = await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watch.cancel()
    if task not in done:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        raise ClientGone
    return task.result()


class ClientGone(Exception):
    """The client disconnected before its answer was ready (nobody reads the response)."""
