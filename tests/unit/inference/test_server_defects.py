"""Bad input to `inhabit serve` that once coerced, 500ed or dropped connections.

Strict types (`max_tokens: true`, `stream: "yes"`, `logprobs: "yes"` are 400s, not guesses),
`best_of` refused unless it equals `n`, the bearer scheme read case-insensitively, and
`/v1/load_weights` bodies that are not JSON or have the wrong types answered 400 JSON on a
connection that stays open (checked on one raw socket: the next request is answered on it).
"""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest

KEY = "k"


@pytest.fixture(scope="module")
def server(moe_folder):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(moe_folder, EngineConfig(seed=0))
    app = create_app(engine, engine.tokenizer, model_name="m", api_key=KEY)
    with BackgroundServer(app) as srv:
        yield srv
    asyncio.run(engine.close())


def _chat(server, body: dict, auth: str = f"Bearer {KEY}") -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2} | body
    return httpx.post(
        server.url + "/v1/chat/completions", json=body, headers={"Authorization": auth}, timeout=60
    )


@pytest.mark.parametrize(
    "body,param",
    [
        ({"max_tokens": True}, "max_tokens"),
        ({"max_tokens": "4"}, "max_tokens"),
        ({"stream": "yes"}, "stream"),
        ({"logprobs": "yes"}, "logprobs"),
        ({"logprobs": 1}, "logprobs"),
        ({"n": 1.0}, "n"),
        ({"top_logprobs": True, "logprobs": True}, "top_logprobs"),
    ],
)
def test_mistyped_fields_are_400_not_coerced(server, body, param):
    r = _chat(server, body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param


def test_best_of_is_refused_unless_it_is_n(server):
    body = {"model": "m", "prompt": "x", "max_tokens": 2}
    url = server.url + "/v1/completions"
    headers = {"Authorization": f"Bearer {KEY}"}
    bad = httpx.post(url, json=body | {"best_of": 3}, headers=headers)
    assert bad.status_code == 400 and "best_of" in bad.json()["error"]["message"]
    assert httpx.post(url, json=body | {"best_of": 1}, headers=headers).status_code == 200
    assert httpx.post(url, json=body | {"best_of": True}, headers=headers).status_code == 400


@pytest.mark.parametrize("scheme,status", [("bearer", 200), ("BEARER", 200), ("Basic", 401)])
def test_bearer_scheme_is_case_insensitive(server, scheme, status):
    assert _chat(server, {}, auth=f"{scheme} {KEY}").status_code == status


def _exchange(sock: socket.socket, request: bytes) -> tuple[int, dict, bytes]:
    """Send one HTTP/1.1 request on `sock` and read its whole response (Content-Length bodies)."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    while len(rest) < int(headers["content-length"]):
        rest += sock.recv(65536)
    return int(lines[0].split()[1]), headers, rest


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b'{"path": 5, "version": "1"}',
        b'{"path": "x"}',
        b"[1, 2]",
        b'{"path": "a\\u0000b", "version": 1}',
    ],
)
def test_malformed_load_weights_is_400_json_and_keeps_the_connection(server, body):
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        request = (
            f"POST /v1/load_weights HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        status, headers, payload = _exchange(sock, request)
        assert status == 400 and headers["content-type"].startswith("application/json")
        assert json.loads(payload)["error"]["type"] == "invalid_request_error"
        assert headers.get("connection", "").lower() != "close"
        status, _, payload = _exchange(sock, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200 and json.loads(payload)["status"] == "ok"


def test_a_weight_path_that_holds_no_weights_is_a_json_error_on_a_kept_connection(server, tmp_path):
    (tmp_path / "notes.txt").write_text("not weights")
    body = json.dumps({"path": str(tmp_path / "notes.txt"), "version": 3}).encode()
    host, port = server.url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        request = (
            f"POST /v1/load_weights HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
        ).encode() + body
        status, _, payload = _exchange(sock, request)
        assert status in (400, 500) and "error" in json.loads(payload), payload
        status, _, _ = _exchange(sock, b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 200
