"""Both servers answer HTTP they cannot parse with their own JSON error, not uvicorn's plain text.

A bad request line, a 1 MB header and a NUL byte in a header, sent on raw sockets to a real
`inhabit serve` app and a real env server on loopback.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket

import pytest

BAD = [
    b"GARBAGE\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (1024 * 1024) + b"\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Nul: a\x00b\r\n\r\n",
]


def _raw(url: str, request: bytes) -> tuple[int, str, bytes]:
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        # Send in pieces and stop once the server answers: it refuses a huge header after its
        # first 16 KB and closes, and bytes still arriving then would reset the connection.
        for i in range(0, len(request), 4096):
            sock.sendall(request[i : i + 4096])
            if select.select([sock], [], [], 0.01)[0]:
                break
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    ctype = next(
        v.strip() for k, _, v in (x.partition(":") for x in lines[1:]) if k.lower() == "content-type"
    )
    return int(lines[0].split()[1]), ctype, body


@pytest.fixture(scope="module")
def serve_url(tmp_path_factory):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    folder = save_model_folder(
        build_tiny_model("dense-1m", vocab_size=len(tok), seed=0), tok, tmp_path_factory.mktemp("m") / "m"
    )
    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    with BackgroundServer(create_app(engine, engine.tokenizer, model_name="m")) as srv:
        yield srv.url
    asyncio.run(engine.close())


@pytest.mark.parametrize("request_bytes", BAD, ids=["request-line", "1MB-header", "NUL-header"])
def test_serve_answers_malformed_http_with_an_openai_error(serve_url, request_bytes):
    status, ctype, body = _raw(serve_url, request_bytes)
    assert status == 400 and ctype.startswith("application/json")
    assert json.loads(body)["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize("request_bytes", BAD, ids=["request-line", "1MB-header", "NUL-header"])
def test_env_server_answers_malformed_http_with_its_error(request_bytes):
    from inhabit.sandbox.process import ProcessSandboxProvider
    from inhabit.sandbox.server import BackgroundServer

    with BackgroundServer(ProcessSandboxProvider, token="a-long-token") as srv:
        status, ctype, body = _raw(srv.url, request_bytes)
    assert status == 400 and ctype.startswith("application/json")
    assert json.loads(body)["code"] == "bad_request"
