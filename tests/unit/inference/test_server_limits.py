"""`inhabit serve` under overload, abandoned clients and hostile bodies, on 127.0.0.1.

One small server: a queue of one request (so a second one is shed), a 4096-token context, a 256
KiB body cap, and no stop at EOS (a request runs to its max_tokens unless aborted). Every defect here
was found by load-testing the server from outside; each test failed on the code before its fix.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.server import BackgroundServer, create_app

KEY = "limits-key"
CONTEXT = 4096
CAP = 256 * 1024
MSG = [{"role": "user", "content": "Fix calc.py"}]


@pytest.fixture(scope="module")
def server(moe_folder):
    config = EngineConfig(seed=0, max_queue=1, max_model_len=CONTEXT, stop_at_eos=False)
    engine = EmbeddedEngine.from_path(moe_folder, config)
    app = create_app(engine, engine.tokenizer, model_name="tiny", api_key=KEY, max_request_bytes=CAP)
    with BackgroundServer(app) as srv:
        srv.engine = engine
        yield srv
    asyncio.run(engine.close())


def _h() -> dict:
    return {"authorization": f"Bearer {KEY}"}


def _idle(engine: EmbeddedEngine, timeout_s: float = 30) -> None:
    """Wait until no request is in flight (an upper bound against hangs, not a timing claim)."""
    deadline = time.monotonic() + timeout_s
    while engine.stats()["running"] or engine.stats()["waiting"]:
        assert time.monotonic() < deadline, f"requests still in flight: {engine.stats()}"
        time.sleep(0.02)


class _Blocker:
    """A streaming request that holds the queue's only place until `release()`."""

    def __init__(self, url: str) -> None:
        self.client = httpx.Client(timeout=60)
        body = {"model": "tiny", "messages": MSG, "max_tokens": CONTEXT - 20, "stream": True}
        self.cm = self.client.stream("POST", url + "/v1/chat/completions", json=body, headers=_h())
        resp = self.cm.__enter__()
        assert resp.status_code == 200
        self.lines = resp.iter_lines()  # kept: a dropped iterator closes the connection
        next(self.lines)  # admitted: its first chunk arrived

    def release(self) -> None:
        self.cm.__exit__(None, None, None)
        self.client.close()


def test_shed_streaming_request_is_429_with_retry_after_before_any_byte(server):
    _idle(server.engine)
    blocker = _Blocker(server.url)
    try:
        body = {"model": "tiny", "messages": MSG, "max_tokens": 4, "stream": True}
        with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, headers=_h()) as r:
            r.read()
            assert r.status_code == 429, r.text
            assert r.headers["retry-after"] == "1" and r.headers["content-type"] == "application/json"
            assert r.json()["error"]["type"] == "rate_limit_error"
    finally:
        blocker.release()
    _idle(server.engine)


def test_streams_of_n_choices_and_responses_are_admitted_whole_or_shed(server):
    """n choices are admitted together or not at all (max_queue=1 here: n=2 is 429 with nothing
    left running); a /v1/responses stream is shed before any byte like a chat stream."""
    _idle(server.engine)
    body = {"model": "tiny", "messages": MSG, "max_tokens": 4, "stream": True, "n": 2}
    with httpx.stream("POST", server.url + "/v1/chat/completions", json=body, headers=_h()) as r:
        r.read()
        assert r.status_code == 429, r.text
    assert server.engine.stats()["running"] == server.engine.stats()["waiting"] == 0
    blocker = _Blocker(server.url)
    try:
        body = {"model": "tiny", "input": "Fix calc.py", "max_output_tokens": 4, "stream": True}
        with httpx.stream("POST", server.url + "/v1/responses", json=body, headers=_h()) as r:
            r.read()
            assert r.status_code == 429 and r.headers["retry-after"] == "1", r.text
    finally:
        blocker.release()
    _idle(server.engine)


def test_openai_sdk_retries_a_shed_stream_until_the_queue_drains(server):
    _idle(server.engine)
    statuses: list[int] = []
    shed = threading.Event()

    def seen(response: httpx.Response) -> None:
        statuses.append(response.status_code)
        if response.status_code == 429:
            shed.set()

    http = httpx.Client(event_hooks={"response": [seen]})
    client = openai.OpenAI(
        base_url=server.url + "/v1", api_key=KEY, max_retries=5, timeout=60, http_client=http
    )
    blocker = _Blocker(server.url)
    released = threading.Thread(target=lambda: (shed.wait(30), blocker.release()))
    released.start()
    try:
        chunks = list(client.chat.completions.create(model="tiny", messages=MSG, max_tokens=4, stream=True))
    finally:
        released.join(60)
    assert statuses[0] == 429 and statuses[-1] == 200
    assert sum(len(c.choices[0].model_extra.get("token_ids") or []) for c in chunks if c.choices) == 4
    _idle(server.engine)


def test_non_streaming_request_is_aborted_when_its_client_leaves(server):
    _idle(server.engine)
    steps0 = server.engine.stats()["steps"]
    body = {"model": "tiny", "messages": MSG, "max_tokens": CONTEXT - 20}
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(server.url + "/v1/chat/completions", json=body, headers=_h(), timeout=0.5)
    _idle(server.engine)
    # Without the abort the request decodes all its CONTEXT - 20 tokens after the client left.
    assert server.engine.stats()["steps"] - steps0 < (CONTEXT - 20) // 2


@pytest.mark.parametrize("max_tokens", [CONTEXT, 10**9, 2**70])
def test_max_tokens_past_the_context_is_400_not_clamped(server, max_tokens):
    for route, extra in (("chat/completions", {"messages": MSG}), ("completions", {"prompt": "x = 1"})):
        body = {"model": "tiny", "max_tokens": max_tokens, **extra}
        r = httpx.post(f"{server.url}/v1/{route}", json=body, headers=_h(), timeout=30)
        assert r.status_code == 400, r.text
        err = r.json()["error"]
        assert err["param"] == "max_tokens" and err["code"] == "context_length_exceeded"


def test_a_body_past_the_cap_is_413_and_a_prompt_too_long_for_the_context_is_400_untokenized(server):
    huge = {"model": "tiny", "messages": [{"role": "user", "content": "x" * 5_000_000}]}
    r = httpx.post(server.url + "/v1/chat/completions", json=huge, headers=_h(), timeout=30)
    assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
    long = {"model": "tiny", "messages": [{"role": "user", "content": "y" * (CAP - 1000)}]}
    r = httpx.post(server.url + "/v1/chat/completions", json=long, headers=_h(), timeout=30)
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"
    assert "at least" in r.json()["error"]["message"]  # the length bound refused it, not the tokenizer
    assert httpx.get(server.url + "/health", timeout=10).status_code == 200


@pytest.mark.parametrize(
    ("route", "body"),
    [
        ("chat/completions", {"messages": [{"role": "user", "content": "a\ud800b"}]}),
        ("chat/completions", {"messages": [{"role": "user", "content": "a\ud800b"}], "stream": True}),
        ("completions", {"prompt": "a\udfffb"}),
        ("completions", {"prompt": "ok", "stop": ["\ud800"], "stream": True}),
    ],
)
def test_lone_surrogates_are_a_400_json_error(server, route, body):
    data = json.dumps({"model": "tiny", "max_tokens": 2, **body})  # ASCII escapes keep the surrogate
    r = httpx.post(
        f"{server.url}/v1/{route}", content=data, headers=_h() | {"content-type": "application/json"}
    )
    assert r.status_code == 400 and r.headers["content-type"] == "application/json"
    assert "surrogate" in r.json()["error"]["message"]


def test_malformed_json_names_no_bogus_param(server):
    r = httpx.post(
        server.url + "/v1/chat/completions",
        content=b'{"model": "tiny", "messages": [{"role": "user", "content": "hi"}',
        headers=_h() | {"content-type": "application/json"},
    )
    err = r.json()["error"]
    assert r.status_code == 400 and err["param"] is None and "not valid JSON" in err["message"]


def test_streaming_top_logprobs_are_filled(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)
    chunks = client.chat.completions.create(
        model="tiny", messages=MSG, max_tokens=5, stream=True, logprobs=True, top_logprobs=3, seed=1
    )
    content = [
        t for c in chunks if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content
    ]
    assert len(content) == 5 and all(len(t.top_logprobs) == 3 for t in content)
    stream = httpx.post(
        server.url + "/v1/completions",
        json={"model": "tiny", "prompt": "x", "max_tokens": 3, "stream": True, "logprobs": 2},
        headers=_h(),
        timeout=60,
    )
    lines = [json.loads(x[6:]) for x in stream.text.splitlines() if x.startswith("data: {")]
    tops = [d for ln in lines for d in (ln["choices"][0]["logprobs"] or {}).get("top_logprobs") or []]
    assert len(tops) == 3 and all(len(d) == 2 for d in tops)


# ---- hostile bodies: never a 500, never an answer that is not JSON ----------------------------

# Text with lone surrogates too (JSON carries them as "\\ud800" escapes).
_txt = st.lists(st.characters() | st.characters(categories=["Cs"]), max_size=8).map("".join)
_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**80), max_value=2**80), st.floats(), _txt
)
_json = st.recursive(
    _scalar,
    lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
    max_leaves=8,
)
_fields = {
    "model": st.one_of(st.just("tiny"), _json),
    "messages": st.one_of(
        st.lists(
            st.fixed_dictionaries(
                {"role": st.sampled_from(["user", "system", "bot", 3]), "content": _txt | _json}
            ),
            max_size=2,
        ),
        _json,
    ),
    "prompt": st.one_of(_txt, st.lists(st.integers(-5, 2**40), max_size=5), _json),
    # Small or past the context: a valid large one would only make the test slow.
    "max_tokens": st.one_of(st.integers(-3, 8), st.integers(CONTEXT, 2**70), _json),
    "temperature": st.one_of(st.floats(allow_nan=True), _json),
    "top_p": st.floats(allow_nan=True),
    "n": st.integers(-2, 100),
    "stop": st.one_of(_txt, st.lists(_txt, max_size=3), _json),
    "seed": st.one_of(st.integers(-(2**70), 2**70), _json),
    "stream": st.one_of(st.booleans(), _json),
    "logprobs": st.one_of(st.booleans(), st.integers(-2, 30), _json),
    "top_logprobs": st.one_of(st.integers(-2, 30), _json),
    "stop_token_ids": st.one_of(st.lists(st.integers(-(2**40), 2**40), max_size=3), _json),
    "stream_options": _json,
    "logit_bias": _json,
}
# A valid request with a few fields replaced by hostile values, so most bodies reach the handler.
_base = st.fixed_dictionaries(
    {
        "model": st.just("tiny"),
        "messages": st.lists(
            st.fixed_dictionaries({"role": st.just("user"), "content": _txt}), min_size=1, max_size=2
        ),
        "prompt": _txt,
        "max_tokens": st.integers(1, 4),
    }
)
_body = st.tuples(_base, st.fixed_dictionaries({}, optional=_fields)).map(lambda p: {**p[0], **p[1]})
_raw = st.one_of(
    _body.map(lambda d: json.dumps(d, allow_nan=True).encode()),
    st.binary(max_size=64),
    st.text(max_size=64).map(lambda t: t.encode("utf-8", "surrogatepass")),
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(raw=_raw, route=st.sampled_from(["chat/completions", "completions"]))
def test_hostile_bodies_get_json_errors_never_a_500(server, raw, route):
    with httpx.Client(timeout=60) as http:
        headers = _h() | {"content-type": "application/json"}
        r = http.post(f"{server.url}/v1/{route}", content=raw, headers=headers)
        assert r.status_code != 500 and r.status_code < 600, r.text
        if r.status_code >= 400:
            assert r.headers["content-type"] == "application/json", r.text
            assert set(r.json()["error"]) == {"message", "type", "param", "code"}
        else:  # answered: a JSON body or a well-formed event stream
            if r.headers["content-type"].startswith("text/event-stream"):
                assert r.text.rstrip().endswith("data: [DONE]")
                assert '"error"' not in r.text, r.text
            else:
                assert r.json()["choices"]
    _idle(server.engine)
