"""Fixtures for evaluation tests: a sandbox provider (process backend unless INHABIT_TEST_SANDBOX
says otherwise, as in tests/unit/tasks/conftest.py) and scripted OpenAI-compatible endpoints on
127.0.0.1 (the agent's policy and LLM judges talk to them)."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from inhabit.sandbox import SandboxConfig, SandboxLimits, create_provider


@pytest.fixture
async def sandbox_provider():
    limits = SandboxLimits(memory_mb=2048, default_timeout_s=60.0, output_bytes=256 * 1024)
    # INHABIT_TEST_SANDBOX=bwrap runs the same tests on the isolating backend (slower to start).
    backend = os.environ.get("INHABIT_TEST_SANDBOX", "process")
    provider = create_provider(SandboxConfig(backend=backend, limits=limits))
    yield provider
    await provider.close()


@pytest.fixture
def chat_server() -> Iterator[Callable[[Callable[[dict], str]], tuple[dict, str]]]:
    """start(reply) -> (state, base_url): a chat-completions server on 127.0.0.1 whose answer is
    `reply(request body)`; state["seen"] holds the requests. Stopped at teardown."""
    stops: list[Callable[[], None]] = []
    yield lambda reply: _serve(reply, stops)
    for stop in stops:
        stop()


def _serve(reply: Callable[[dict], str], stops: list) -> tuple[dict, str]:
    import uvicorn
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

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    srv = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(200):
        if srv.started:
            break
        time.sleep(0.05)

    def stop() -> None:
        srv.should_exit = True
        thread.join(timeout=10)
        sock.close()

    stops.append(stop)
    return state, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
