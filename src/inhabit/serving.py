"""`BackgroundServer`: any ASGI app served by uvicorn in a thread on a bound socket; `bind_socket`.

For tests, benchmarks and notebooks that need a real server on loopback (port 0 picks a free
port). Kept free of heavy imports (no torch) so that any part's tests can use it;
`inhabit.inference.server` re-exports it.
"""

from __future__ import annotations

import time
from typing import Any


class BackgroundServer:
    """Runs an app with uvicorn in a thread on a loopback socket (tests, benchmarks, notebooks).

    with BackgroundServer(app) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="k")
    """

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        import socket
        import threading

        import uvicorn

        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, port))
        self.host, self.port = self._sock.getsockname()[:2]
        self.url = f"http://{self.host}:{self.port}"
        state = getattr(app, "state", None)
        http = getattr(state, "http_protocol", None) or "auto"  # a JSON 400 for unparsable requests
        config = uvicorn.Config(app, log_level="warning", lifespan="off", http=http)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def __enter__(self) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the server did not start within 30 s")
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)
        self._sock.close()


def bind_socket(host: str, port: int, command: str) -> Any:
    """A listening TCP socket on host:port, or a typed error saying what to do (port taken...)."""
    import socket

    from inhabit.errors import ConfigError

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        family, _, _, _, addr = infos[0]
        # IPPROTO_TCP explicitly: asyncio sets TCP_NODELAY only on sockets whose proto says TCP.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError as e:
        raise ConfigError(
            f"{command} cannot listen on {host}:{port}: {e.strerror or e}; "
            "pick another --port (or --host), or stop what uses it"
        ) from None
    sock.set_inheritable(True)
    return sock


def cap_body(receive: Any, cap: int, detail: Any) -> Any:
    """An ASGI `receive` that raises 413 (`HTTPException`, with `detail`) once the body streamed in
    passes `cap` bytes, so a body sent without (or with a lying) Content-Length is never buffered
    whole. An HTTPException, because FastAPI turns any other error while reading into a 400."""
    from starlette.exceptions import HTTPException

    seen = 0

    async def capped_receive() -> dict[str, Any]:
        nonlocal seen
        message = await receive()
        if message["type"] == "http.request":
            seen += len(message.get("body", b""))
            if seen > cap:
                raise HTTPException(413, detail=detail)
        return message

    return capped_receive


async def client_disconnected(request: Any) -> None:
    """Returns when the client of `request` goes away. Only for requests whose body was read
    already: the next message the server then gives is the disconnect."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def send_json(send: Any, status: int, body: Any, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    """A whole JSON response straight on an ASGI `send` (for middleware that answers by itself)."""
    import json

    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data})


class ErrorsAsJSON:
    """A plain ASGI middleware answering any exception the app lets through with a JSON 500
    (`body_of(exc)`), logged here and not re-raised: Starlette's own last-resort handler re-raises
    to the server, which then drops the connection, so the client's next request on it fails too.
    An exception after the response started (a stream) ends that response; the connection stays."""

    def __init__(self, app: Any, body_of: Any) -> None:
        self.app, self.body_of = app, body_of

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: dict[str, Any]) -> None:
            nonlocal started
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except Exception as e:
            import logging

            logging.getLogger("inhabit.serving").error("request failed", exc_info=e)
            if not started:
                await send_json(send, 500, self.body_of(e))
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})


def json_400_protocol(body_of: Any) -> type:
    """uvicorn's h11 protocol, answering a request it cannot parse (a bad request line, a header
    too large or with a NUL) with a JSON 400, `body_of(reason)`, instead of its plain text. Give it
    to `uvicorn.Config(http=...)`; `app.state.http_protocol` carries it to `BackgroundServer`."""
    import json

    import h11
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class JSON400Protocol(H11Protocol):
        def send_400_response(self, msg: str) -> None:
            data = json.dumps(body_of(msg)).encode()
            headers = [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(data)).encode()),
                (b"connection", b"close"),
            ]
            for event in (
                h11.Response(status_code=400, headers=headers),
                h11.Data(data=data),
                h11.EndOfMessage(),
            ):
                self.transport.write(self.conn.send(event))
            self.transport.close()

    return JSON400Protocol
