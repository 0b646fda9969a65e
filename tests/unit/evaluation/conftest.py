"""Fixtures for evaluation tests: a sandbox provider (`inhabit.tasks.fixtures`, shared with the task
and grading tests) and scripted OpenAI-compatible endpoints on 127.0.0.1 (the agent's policy and
LLM judges talk to them)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import pytest

from inhabit.serving import BackgroundServer
from inhabit.tasks.fixtures import sandbox_provider

__all__ = ["sandbox_provider"]


@pytest.fixture
def chat_server() -> Iterator[Callable[[Callable[[dict], str]], tuple[dict, str]]]:
    """start(reply) -> (state, base_url): a chat-completions server on 127.0.0.1 whose answer is
    `reply(request body)`; state["seen"] holds the requests. Stopped at teardown."""
    with contextlib.ExitStack() as servers:
        yield lambda reply: _serve(reply, servers)


def _serve(reply: Callable[[dict], str], servers: contextlib.ExitStack) -> tuple[dict, str]:
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    state: dict = {"seen": []}
    app = FastAPI()

    @app.get("/v1/models")
    def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model", "created": 0,
                                                         "owned_by": "test"}]})  # fmt: skip

    @app.post("/v1/chat/completions")
    def chat(body: dict) -> JSONResponse:
        state["seen"].append(body)
        text = reply(body)
        return JSONResponse(
            {
                "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
            }
        )  # fmt: skip

    server = servers.enter_context(BackgroundServer(app))
    return state, f"{server.url}/v1"
