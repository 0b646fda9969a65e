"""`inhabit serve`: bind the port, load the model folder, and serve `create_app` (server.py) until
interrupted, with the parts a server may wire in: an online session recorder (`--sessions`,
`inhabit.online`) and a weight store to follow (`--follow`, `inhabit.weights`).

A command, so it sits in the top layer and may import those parts (docs/architecture.md, "Layers").
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI

from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.server import create_app
from inhabit.serving import bind_socket

log = logging.getLogger(__name__)


def serve(config: Any) -> None:
    """Bind the port, load the model folder, announce, and serve until interrupted (`inhabit serve`).

    Binding comes first so that a taken port is one clear error before minutes of loading. On
    SIGTERM/SIGINT the engine stops at once: requests in flight answer 503 (`EngineClosed`).
    """
    import contextlib

    import uvicorn

    from inhabit.inference.chat_tools import check_servable

    sock = bind_socket(config.host, config.port, "serve")
    _quiet_progress_bars()
    engine = EmbeddedEngine.from_path(config.model, config.engine)
    try:
        parser = check_servable(engine.tokenizer, config.tool_call_parser)
    except Exception:
        engine.close_blocking()
        sock.close()
        raise
    name = config.served_model_name or Path(config.model).resolve().name

    recorder = None
    if config.sessions:
        from inhabit.online.recorder import ServeRecorder

        recorder = ServeRecorder(
            config.sessions, model=name, keep_constrained=config.sessions_keep_constrained
        )

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI):
        stop = asyncio.Event()
        follower = None
        if config.follow:  # newest version of a weight store, swapped in between decoding steps
            from inhabit.weights.subscribe import Subscriber, SubscriberConfig

            sub = Subscriber(
                config.follow, SubscriberConfig(name="serve", poll_interval_s=config.follow_poll_s)
            )
            follower = asyncio.create_task(sub.follow(engine, stop=stop))
        yield
        stop.set()
        if follower is not None:
            await asyncio.gather(follower, return_exceptions=True)
        await engine.close()
        if recorder is not None:
            recorder.close()

    app = create_app(
        engine,
        engine.tokenizer,
        model_name=name,
        api_key=config.api_key,
        max_upload_bytes=config.max_upload_bytes,
        max_request_bytes=config.max_request_bytes,
        tool_call_parser=parser,
        recorder=recorder,
        xml_tools=config.xml_tools,
        reasoning_parser=None if config.reasoning_parser == "none" else config.reasoning_parser,
    )
    app.router.lifespan_context = lifespan
    host, port = sock.getsockname()[:2]
    log.info(
        "serving %s as %r on http://%s:%d/v1; dtype %s; decode %s",
        config.model,
        name,
        host,
        port,
        engine.dtype_choice.describe(),
        "lean" if engine._lean is not None else "stock forward",
    )

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            # Requests in flight end now with 503 (a stream with an error event) instead of a
            # bare 500 when the graceful timeout cancels them.
            engine.begin_close()
            super().handle_exit(sig, frame)

    # Keep-alive as the env server's: clients that pool connections (OpenAI's SDK, httpx) must not
    # send a request on a connection the server is just closing, which resets it under load.
    config_ = uvicorn.Config(
        app,
        log_level="warning",
        timeout_graceful_shutdown=10,
        timeout_keep_alive=30,
        http=app.state.http_protocol,
    )
    _Server(config_).run(sockets=[sock])


def _quiet_progress_bars() -> None:
    """No third-party progress bars (checkpoint shards) in a server's output."""
    import os

    from transformers.utils import logging as hf_logging

    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    hf_logging.disable_progress_bar()
