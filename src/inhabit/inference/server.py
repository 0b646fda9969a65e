"""`inhabit serve`: an OpenAI-compatible HTTP server over an `EmbeddedEngine`, with RL extensions.

Endpoints: `GET /v1/models` (and `/v1/models/{id}`), `POST /v1/chat/completions` (streaming with
SSE; OpenAI tool calling through chat_tools.py and tool_parsers.py), `POST /v1/responses` (the
Responses API subset agent SDKs use, responses.py), `POST /v1/completions` (streaming too), `POST
/v1/load_weights` (bearer token required: a JSON `{"path", "version"}` naming a folder on this
machine, or a raw safetensors body with `?version=N`), `GET /health`, `GET /v1/engine/stats`,
`GET /metrics` (Prometheus, server_metrics.py). The
extension fields are described in protocol.py. When the server has an API key every /v1 endpoint
requires it; without one the weight endpoint is disabled (403), since a weight load replaces the
policy.

Errors are OpenAI error objects (`{"error": {"message", "type", "param", "code"}}`, always JSON):
400 for bad requests (a prompt that cannot fit the context, or `max_tokens` that would pass it),
401/403 for auth, 404 for unknown models or routes, 413 for bodies past `max_request_bytes` (or
uploads past `max_upload_bytes`), 429 with `Retry-After` when the engine's queue is full (streaming
requests too: admission is decided before the first byte), 503 once it is closed. A request whose
client disconnects is aborted at the engine's next step, streaming or not. See server_limits.py.
`inhabit serve` itself (binding, loading, sessions, following a weight store) is serve_cli.py.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from fastapi import Depends, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from inhabit.errors import InhabitError
from inhabit.inference.chat_tools import assistant_message
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import Completion, GenerationRequest
from inhabit.inference.errors import (
    EngineClosed,
    EngineOverloaded,
    InvalidRequest,
    WeightLoadError,
)
from inhabit.inference.protocol import (
    ChatRequest,
    CompletionRequest,
    LoadWeightsRequest,
    chat_logprobs,
    completion_logprobs,
    encode_routes,
    error_body,
)
from inhabit.inference.server_limits import (
    BodyCap,
    ClientGone,
    ErrorJSON,
    PromptBound,
    until_disconnected,
)
from inhabit.inference.server_stream import ChatChunks, CompletionChunks, Stream, sse, usage
from inhabit.serving import (  # noqa: F401  (BackgroundServer: re-exported)
    BackgroundServer,
    ErrorsAsJSON,
    json_400_protocol,
)

log = logging.getLogger(__name__)


class ApiError(Exception):
    """An error answered as an OpenAI error object with `status`."""

    def __init__(self, status: int, message: str, type_: str = "invalid_request_error", **kw: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.extra = status, message, type_, kw


class SessionRecorder(Protocol):
    """Records served turns as online sessions (`inhabit.online.recorder.ServeRecorder`, a part
    above this one, passed in by `inhabit serve`)."""

    async def record(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        completion: Completion,
        *,
        constrained: bool = False,
    ) -> None: ...

    def install_routes(
        self, app: FastAPI, *, auth: Callable[[Request], None], api_error: type[Exception]
    ) -> None:
        """Add the recorder's own routes (a client's signals on its session) to `app`."""
        ...


def create_app(
    engine: EmbeddedEngine,
    tokenizer: Any,
    *,
    model_name: str,
    api_key: str | None = None,
    max_upload_bytes: int = 8 * 1024**3,
    max_request_bytes: int = 4 * 1024**2,
    tool_call_parser: str | None = "auto",
    recorder: SessionRecorder | None = None,
    xml_tools: bool = False,
    reasoning_parser: str | None = None,
) -> FastAPI:
    """The FastAPI app serving `engine` (the caller owns the engine's lifetime).

    `tool_call_parser`: one of tool_parsers.PARSERS, "auto" (detected from the chat template), or
    None (requests with tools are refused). `xml_tools`: describe `tools` in inhabit's XML format
    for a template that renders none (else such requests answer 400). `reasoning_parser`: one of
    reasoning.PARSERS, splitting `<think>` blocks into `reasoning_content`. `recorder` (a
    `SessionRecorder`) records chat completions sent with an X-Inhabit-Session header as online
    sessions and adds its routes."""
    from inhabit.inference.tool_parsers import detect_parser, make_parser

    if tool_call_parser == "auto":
        tool_call_parser = detect_parser(getattr(tokenizer, "chat_template", None))
    elif tool_call_parser is not None:
        make_parser(tool_call_parser)  # an unknown name fails here, at startup
    if reasoning_parser is not None:
        from inhabit.inference.reasoning import make_reasoning

        make_reasoning(reasoning_parser)
    from inhabit.inference.server_metrics import CONTENT_TYPE, ServeMetrics

    app = FastAPI(title="inhabit inference server")
    app.state.engine = engine
    app.state.http_protocol = json_400_protocol(
        lambda reason: error_body(f"malformed HTTP request: {reason}", "invalid_request_error")
    )
    metrics = ServeMetrics(engine)
    _install_error_handlers(app, on_overload=metrics.rejected.labels("overloaded").inc)
    app.add_middleware(BodyCap, cap=max_request_bytes, exempt=("/v1/load_weights",))
    bound = PromptBound(tokenizer)

    def auth(request: Request) -> None:
        if api_key is None:
            return
        # The scheme is case-insensitive (RFC 9110), as the env server reads it.
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), api_key.encode()):
            raise ApiError(
                401, "missing or wrong API key (Authorization: Bearer ...)", "authentication_error"
            )

    def check_model(name: str) -> None:
        if name != model_name:
            raise ApiError(
                404,
                f"model {name!r} does not exist; this server serves {model_name!r}",
                code="model_not_found",
                param="model",
            )

    def budget(prompt_len: int, asked: int | None, param: str) -> int:
        room = engine.max_model_len - prompt_len
        if room < 1:
            raise ApiError(
                400,
                f"the prompt has {prompt_len} tokens; the context is {engine.max_model_len}",
                param=param,
                code="context_length_exceeded",
            )
        if asked is not None and asked > room:  # as OpenAI and vLLM: refuse rather than clamp
            raise ApiError(
                400,
                f"max_tokens={asked} and the prompt's {prompt_len} tokens exceed the context of "
                f"{engine.max_model_len} tokens; ask for at most {room}",
                param="max_tokens",
                code="context_length_exceeded",
            )
        return asked or room

    def refuse_long_text(texts: list[str], param: str) -> None:
        """400 before tokenizing when the text alone cannot fit the context."""
        if (least := bound.at_least(texts)) >= engine.max_model_len:
            raise ApiError(
                400,
                f"the prompt is at least {least} tokens long; the context is {engine.max_model_len}",
                param=param,
                code="context_length_exceeded",
            )

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "version": engine.version}

    @app.get("/metrics")
    async def prometheus() -> Response:  # unauthenticated, as vLLM's: counts and latencies only
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    def card() -> dict:
        return {
            "id": model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "inhabit",
            "max_model_len": engine.max_model_len,
            "policy_version": engine.version,
            "tool_call_parser": tool_call_parser,
            "reasoning_parser": reasoning_parser,
        }

    @app.get("/v1/models", dependencies=[Depends(auth)])
    async def models() -> dict:
        return {"object": "list", "data": [card()]}

    @app.get("/v1/models/{model_id:path}", dependencies=[Depends(auth)])
    async def model(model_id: str) -> dict:
        check_model(model_id)
        return card()

    @app.get("/v1/engine/stats", dependencies=[Depends(auth)])
    async def stats() -> dict:
        return engine.stats()

    @app.post("/v1/chat/completions", dependencies=[Depends(auth)])
    async def chat(req: ChatRequest, request: Request) -> Any:
        from inhabit.inference.chat_tools import BadChatRequest, attach_reasoning, encode_plan, plan_chat

        check_model(req.model)
        if msg := req.unsupported():
            raise ApiError(400, msg)
        try:
            plan = plan_chat(req, tool_call_parser, xml_tools)
            refuse_long_text([m["content"] for m in plan.messages], "messages")
            prompt = await asyncio.to_thread(encode_plan, tokenizer, plan)
        except BadChatRequest as e:
            raise ApiError(400, str(e), param=e.param) from None
        attach_reasoning(plan, reasoning_parser, tokenizer, prompt)
        max_tokens = budget(len(prompt), req.max_completion_tokens or req.max_tokens, "messages")
        gens = [
            GenerationRequest(prompt, _with_max(req.sampling(max_tokens, i), max_tokens, plan.guide))
            for i in range(req.n)
        ]
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        if req.stream:
            fmts = [ChatChunks(rid, model_name, tokenizer, req, plan, i) for i in range(req.n)]
            return sse(engine.open_streams(gens), gens[0], fmts, tokenizer, req.stops())
        outs = _checked(await until_disconnected(request, engine.generate(gens)))
        if recorder is not None and (session := request.headers.get("x-inhabit-session")):
            await recorder.record(session, plan.messages, outs[0], constrained=plan.guide is not None)
        choices = []
        for i, c in enumerate(outs):
            message, finish = assistant_message(plan, c.text, c.finish_reason)
            choice = {
                "index": i,
                "message": message,
                "logprobs": chat_logprobs(tokenizer, c.token_ids, c.logprobs, c.top_logprobs)
                if req.logprobs
                else None,
                "finish_reason": finish,
            }
            choices.append(choice | _extensions(c, req, plan.guide is not None))
        return {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": usage(prompt, outs),
            "prompt_token_ids": prompt,
        }

    from inhabit.inference import responses

    responses.install(
        app,
        engine,
        tokenizer,
        model_name=model_name,
        tool_call_parser=tool_call_parser,
        xml_tools=xml_tools,
        reasoning_parser=reasoning_parser,
        auth=auth,
        check_model=check_model,
        budget=budget,
        refuse_long_text=refuse_long_text,
        api_error=ApiError,
        checked=_checked,
        stream_response=Stream,
    )

    @app.post("/v1/completions", dependencies=[Depends(auth)])
    async def completions(req: CompletionRequest, request: Request) -> Any:
        check_model(req.model)
        if msg := req.unsupported():
            raise ApiError(400, msg)
        texts = [req.prompt] if isinstance(req.prompt, str) else [p for p in req.prompt if isinstance(p, str)]
        for text in texts:
            refuse_long_text([text], "prompt")
        prompts = await asyncio.to_thread(_prompts, tokenizer, req.prompt)
        if req.stream and len(prompts) != 1:
            raise ApiError(400, "streaming supports one prompt at a time", param="prompt")
        from inhabit.inference.constrained import structured_outputs_guide

        try:
            guide = structured_outputs_guide(req.structured_outputs)
        except ValueError as e:
            raise ApiError(400, str(e), param="structured_outputs") from None
        gens = []
        for p in prompts:
            max_tokens = budget(len(p), req.max_tokens, "prompt")
            gens += [
                GenerationRequest(p, _with_max(req.sampling(max_tokens, i), max_tokens, guide))
                for i in range(req.n)
            ]
        rid = f"cmpl-{uuid.uuid4().hex}"
        if req.stream:
            fmts = [CompletionChunks(rid, model_name, tokenizer, req, None, i) for i in range(req.n)]
            for f in fmts:
                f.constrained = guide is not None
            return sse(engine.open_streams(gens), gens[0], fmts, tokenizer, req.stops())
        outs = _checked(await until_disconnected(request, engine.generate(gens)))
        choices = []
        for i, c in enumerate(outs):
            lp = None
            if req.logprobs is not None:
                lp = completion_logprobs(
                    tokenizer,
                    c.token_ids,
                    c.logprobs,
                    c.top_logprobs if req.logprobs else None,
                    as_ids=req.return_tokens_as_token_ids,
                )
            choice = {"index": i, "text": c.text, "logprobs": lp, "finish_reason": c.finish_reason}
            extra = _extensions(c, req, guide is not None) | {"prompt_token_ids": c.prompt_token_ids}
            choices.append(choice | extra)
        usage = {
            "prompt_tokens": sum(len(c.prompt_token_ids or []) for c in outs),
            "completion_tokens": sum(len(c.token_ids) for c in outs),
        }
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return {
            "id": rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": choices,
            "usage": usage,
        }

    if recorder is not None:
        recorder.install_routes(app, auth=auth, api_error=ApiError)

    @app.post("/v1/load_weights")
    async def load_weights(request: Request, version: int | None = Query(None, ge=0)) -> dict:
        if api_key is None:
            raise ApiError(
                403, "weight loading is disabled: start the server with --api-key", "permission_error"
            )
        auth(request)
        t0 = time.perf_counter()
        ctype = request.headers.get("content-type", "")
        if ctype.startswith("application/json"):
            body = _load_weights_body(await request.body())
            if "\x00" in body.path or not Path(body.path).exists():
                raise ApiError(400, f"weights path {body.path} does not exist on the server", param="path")
            await engine.load_weights(body.path, body.version)
        else:
            if version is None:
                raise ApiError(400, "a safetensors upload needs ?version=N", param="version")
            data = await _read_limited(request, max_upload_bytes)
            from safetensors.torch import load as load_safetensors

            try:
                state = load_safetensors(data)
            except Exception as e:  # safetensors raises its own error types
                raise ApiError(400, f"the body is not a safetensors file: {e}") from e
            await engine.load_weights(state, version)
        return {"version": engine.version, "seconds": time.perf_counter() - t0}

    return app


def _load_weights_body(raw: bytes) -> LoadWeightsRequest:
    """The JSON body of /v1/load_weights, or a 400 naming what is wrong (never a 500)."""
    import json

    from pydantic import ValidationError

    try:
        return LoadWeightsRequest.model_validate(json.loads(raw))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ApiError(400, f"the body is not valid JSON ({e})") from None
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or None
        raise ApiError(400, f"{where or 'body'}: {first.get('msg')}", param=where) from None


def _with_max(sp, max_tokens: int, guide=None):
    from dataclasses import replace

    return replace(sp, max_tokens=max_tokens, guide=guide)


def _prompts(tokenizer: Any, prompt: Any) -> list[list[int]]:
    if isinstance(prompt, str):
        prompt = [prompt]
    if prompt and all(isinstance(t, int) for t in prompt):
        return [list(prompt)]
    out = []
    for p in prompt:
        if isinstance(p, str):
            out.append(list(tokenizer(p, add_special_tokens=False)["input_ids"]))
        else:
            out.append(list(p))
    if not out or any(not p for p in out):
        raise ApiError(400, "the prompt is empty", param="prompt")
    return out


def _checked(outs: list[Completion]) -> list[Completion]:
    for c in outs:
        if c.finish_reason == "error":
            raise ApiError(500, f"generation failed: {c.error}", "server_error")
    return outs


def _extensions(c: Completion, req: Any, constrained: bool = False) -> dict:
    out = {"token_ids": c.token_ids, "routed_experts": encode_routes(c), "policy_versions": c.versions}
    out |= {"sampling_adjusted": True} if req.adjusts() else {}
    return out | ({"constrained": True} if constrained else {})


async def _read_limited(request: Request, limit: int) -> bytes:
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ApiError(413, f"upload larger than {limit} bytes", code="payload_too_large")
        chunks.append(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------ errors


def _install_error_handlers(app: FastAPI, on_overload: Callable[[], None] = lambda: None) -> None:
    def respond(status: int, message: str, type_: str, param=None, code=None, headers=None) -> JSONResponse:
        return ErrorJSON(error_body(message, type_, param, code), status_code=status, headers=headers)

    @app.exception_handler(ApiError)
    async def _api(_: Request, e: ApiError) -> JSONResponse:
        return respond(e.status, e.message, e.type, e.extra.get("param"), e.extra.get("code"))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = e.errors()
        if any(err.get("type") == "json_invalid" for err in errors):
            reason = next((err.get("ctx") or {}).get("error", "") for err in errors)
            return respond(
                400, f"the body is not valid JSON ({reason})".replace(" ()", ""), "invalid_request_error"
            )
        first = errors[0] if errors else {}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        msg = "; ".join(
            f"{'.'.join(str(p) for p in err.get('loc', ()) if p != 'body')}: {err.get('msg')}"
            for err in errors
        )
        return respond(400, msg or "invalid request", "invalid_request_error", ".".join(loc) or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        if isinstance(e.detail, dict):  # the body cap's own error object
            return ErrorJSON(e.detail, status_code=e.status_code)
        return respond(e.status_code, str(e.detail), "invalid_request_error")

    @app.exception_handler(EngineOverloaded)
    async def _overloaded(_: Request, e: EngineOverloaded) -> JSONResponse:
        # Retry-After lets OpenAI's SDK (and others) back off and retry on their own.
        on_overload()
        return respond(
            429, str(e), "rate_limit_error", code="engine_overloaded", headers={"Retry-After": "1"}
        )

    @app.exception_handler(ClientGone)
    async def _gone(_: Request, e: ClientGone) -> JSONResponse:
        return respond(
            499, "the client closed the connection; the request was aborted", "invalid_request_error"
        )

    handlers: list[tuple[type[Exception], int, str]] = [
        (InvalidRequest, 400, "invalid_request_error"),
        (WeightLoadError, 400, "invalid_request_error"),
        (EngineClosed, 503, "server_error"),
        (InhabitError, 500, "server_error"),
    ]
    for cls, status, type_ in handlers:
        app.add_exception_handler(cls, _handler(respond, status, type_))

    # Anything else: a JSON 500 from a middleware that keeps the connection (serving.ErrorsAsJSON).
    app.add_middleware(
        ErrorsAsJSON,
        body_of=lambda e: error_body(
            f"internal error ({type(e).__name__}); see the server log", "server_error"
        ),
    )


def _handler(respond: Callable[..., JSONResponse], status: int, type_: str):
    async def handle(_: Request, e: Exception) -> JSONResponse:
        return respond(status, str(e), type_)

    return handle
