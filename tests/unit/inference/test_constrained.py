"""Constrained decoding: `response_format`, Responses `text.format` and forced tool calls.

The model is a random tiny one (it writes noise left to itself), served by `inhabit serve` on
loopback and asked through the real `openai` client; only the grammar's mask can make its answer
valid JSON matching the schema or a call to the named function. The template is the Qwen3-style
one of test_server_tools.py (hermes calls). The engine-level tests check what the mask must not
change: the reported logprobs are the model's own, from a full forward of the weights.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Literal

import httpx
import jsonschema
import openai
import pydantic
import pytest
import torch
from test_server_tools import QWEN3_STYLE

MODEL = "tiny-random"
MESSAGES = [{"role": "user", "content": "Describe the weather as JSON."}]


class Weather(pydantic.BaseModel):
    sunny: bool
    sky: Literal["clear", "cloudy", "grey"]
    celsius: int = pydantic.Field(ge=-40, le=50)


# Arguments with bounded values: a random model left inside a free string rarely closes it.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"enum": ["calc.py", "test_calc.py"]}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run",
            "parameters": {
                "type": "object",
                "properties": {"cmd": {"enum": ["pytest -q", "ls"]}, "timeout_s": {"type": "boolean"}},
                "required": ["cmd", "timeout_s"],
            },
        },
    },
]
SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2},
    },
    "required": ["ok", "color", "tags"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tokenizer):
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = QWEN3_STYLE
    model = build_tiny_model("dense-1m", vocab_size=len(tok), seed=0)
    return save_model_folder(model, tok, tmp_path_factory.mktemp("models") / MODEL)


@pytest.fixture(scope="module")
def server(folder):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    app = create_app(engine, engine.tokenizer, model_name=MODEL, api_key="k")
    with BackgroundServer(app) as srv:
        srv.engine = engine
        yield srv
    asyncio.run(engine.close())


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, timeout=60)


def _post(server, body: dict, path: str = "/v1/chat/completions") -> httpx.Response:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 8} | body
    return httpx.post(server.url + path, json=body, headers={"Authorization": "Bearer k"}, timeout=60)


# ------------------------------------------------------------------ response_format


def test_random_model_writes_free_text_without_a_format(client):
    """The control: the same request without a format is not JSON, so the mask is what makes it."""
    text = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=40, temperature=0)
    with pytest.raises(json.JSONDecodeError):
        json.loads(text.choices[0].message.content)


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_json_schema_answer_matches_the_schema(client, temperature):
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True}}
    for seed in range(3):
        resp = client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=200, temperature=temperature, seed=seed,
            response_format=fmt, logprobs=True,
        )  # fmt: skip
        choice = resp.choices[0]
        assert choice.finish_reason == "stop", choice
        jsonschema.validate(json.loads(choice.message.content), SCHEMA)
        assert choice.model_extra["constrained"] is True
        assert len(choice.logprobs.content) == len(choice.model_extra["token_ids"])


def test_pydantic_response_format_through_parse(client):
    parsed = client.chat.completions.parse(
        model=MODEL, messages=MESSAGES, max_tokens=200, temperature=0, response_format=Weather
    )
    weather = parsed.choices[0].message.parsed
    assert isinstance(weather, Weather) and -40 <= weather.celsius <= 50


def test_streamed_json_schema_is_the_same_answer(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True}}
    kw = dict(model=MODEL, messages=MESSAGES, max_tokens=200, temperature=0, response_format=fmt)
    whole = client.chat.completions.create(**kw).choices[0].message.content
    chunks = list(client.chat.completions.create(**kw, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == whole
    assert all(c.choices[0].model_extra.get("constrained") for c in chunks)


def test_json_object_is_forced_against_a_bias(client, server):
    """A +100 bias on "}" would make the model answer "}" at once; the mask forces "{" first, then
    lets "}" close the object: exactly "{}", and the stop token after it."""
    tok = server.engine.tokenizer
    close = tok.convert_tokens_to_ids("}")
    resp = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=20, temperature=0, logit_bias={str(close): 100},
        response_format={"type": "json_object"},
    )  # fmt: skip
    choice = resp.choices[0]
    assert choice.message.content == "{}" and choice.finish_reason == "stop"
    assert json.loads(choice.message.content) == {}
    unconstrained = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=3, temperature=0, logit_bias={str(close): 100}
    )
    assert unconstrained.choices[0].message.content.startswith("}")


def test_responses_text_format_json_schema(client):
    parsed = client.responses.parse(
        model=MODEL, input="Describe the weather.", max_output_tokens=200, temperature=0, text_format=Weather
    )
    assert isinstance(parsed.output_parsed, Weather)
    assert parsed.text.format.type == "json_schema"


@pytest.mark.parametrize(
    "fmt,words",
    [
        ({"type": "grammar"}, "not supported"),
        ({"type": "json_schema"}, "json_schema needs"),
        ({"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}, "Type should be"),
    ],
)
def test_bad_response_formats_are_400(server, fmt, words):
    r = _post(server, {"response_format": fmt})
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == "response_format" and words in err["message"], err


# ------------------------------------------------------------------ forced tool calls


def test_random_model_writes_no_call_under_auto(client):
    resp = client.chat.completions.create(model=MODEL, messages=MESSAGES, tools=TOOLS, max_tokens=40)
    assert resp.choices[0].message.tool_calls is None


@pytest.mark.parametrize("stream", [False, True])
def test_named_function_is_called_with_valid_arguments(client, stream):
    choice = {"type": "function", "function": {"name": "run"}}
    kw = dict(model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice=choice, max_tokens=200, temperature=0)
    if not stream:
        msg = client.chat.completions.create(**kw).choices[0]
        assert msg.finish_reason == "tool_calls", msg
        calls = [(c.function.name, c.function.arguments) for c in msg.message.tool_calls]
    else:
        parts: dict[int, list[str]] = {}
        for ch in client.chat.completions.create(**kw, stream=True):
            for d in ch.choices[0].delta.tool_calls or []:
                parts.setdefault(d.index, ["", ""])
                parts[d.index][0] += d.function.name or ""
                parts[d.index][1] += d.function.arguments or ""
        calls = [tuple(parts[i]) for i in sorted(parts)]
    assert calls and all(name == "run" for name, _ in calls)
    for _, args in calls:
        jsonschema.validate(json.loads(args), TOOLS[1]["function"]["parameters"])


def test_required_forces_one_call_among_the_tools(client):
    resp = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=200, temperature=1.0, seed=3,
    )  # fmt: skip
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0].function
    schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call.name]
    jsonschema.validate(json.loads(call.arguments), schema)
    assert choice.model_extra["constrained"] is True


def test_forced_call_in_a_format_without_a_grammar_is_400(folder):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    app = create_app(engine, engine.tokenizer, model_name=MODEL, api_key="k", tool_call_parser="qwen3_coder")
    try:
        with BackgroundServer(app) as srv:
            r = _post(srv, {"tools": TOOLS, "tool_choice": "required"})
    finally:
        asyncio.run(engine.close())
    assert r.status_code == 400 and r.json()["error"]["param"] == "tool_choice"
    assert "qwen3_coder" in r.json()["error"]["message"]


# ------------------------------------------------------------------ the engine and the sampler


def test_masked_draw_reports_the_models_logprob():
    from inhabit.inference.sampling import RowSampling, sample_tokens

    logits = torch.tensor([[4.0, 1.0, 0.0, -1.0]])
    allowed = torch.tensor([False, False, True, True])
    row = RowSampling(0.0, 1.0, torch.Generator().manual_seed(0), allowed=allowed)
    tokens, logps, top = sample_tokens(logits, [row], "raw", top_k=2)
    assert tokens.tolist() == [2]  # the best allowed token, not the argmax
    assert logps.item() == pytest.approx(torch.log_softmax(logits, -1)[0, 2].item())
    assert top[1].tolist() == [[0, 1]]  # the model's own top tokens, masked or not


def test_engine_logprobs_under_a_mask_are_a_full_forwards(folder):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.constrained import Guide
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.engine import GenerationRequest, SamplingParams

    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0, logprobs_mode="raw"))
    prompt = engine.tokenizer("The weather:", add_special_tokens=False)["input_ids"]
    sp = SamplingParams(
        temperature=1.0, max_tokens=200, seed=5, guide=Guide("json_schema", json.dumps(SCHEMA))
    )
    try:
        (c,) = asyncio.run(engine.generate([GenerationRequest(prompt, sp)]))
    finally:
        asyncio.run(engine.close())
    jsonschema.validate(json.loads(c.text), SCHEMA)
    with torch.no_grad():
        logits = engine.model(torch.tensor([prompt + c.token_ids])).logits[0].float()
    full = torch.log_softmax(logits[len(prompt) - 1 : -1], -1).gather(1, torch.tensor(c.token_ids)[:, None])
    assert torch.allclose(torch.tensor(c.logprobs), full[:, 0], atol=1e-4)


def test_remote_engine_sends_the_guide_as_structured_outputs(server):
    """The client the vLLM backend uses: a guided request through `/v1/completions` comes back
    constrained (vLLM reads the same `structured_outputs`)."""
    from inhabit.inference.constrained import Guide, tool_call_guide
    from inhabit.inference.engine import GenerationRequest, SamplingParams
    from inhabit.inference.remote import RemoteConfig, RemoteEngine

    prompt = server.engine.tokenizer("The weather:", add_special_tokens=False)["input_ids"]
    guides = [
        Guide("json_schema", json.dumps(SCHEMA)),
        tool_call_guide(TOOLS, ["read_file"], "hermes", parallel=False),
    ]

    async def ask() -> list:
        remote = RemoteEngine(RemoteConfig(base_url=server.url, api_key="k"))
        try:
            sps = [SamplingParams(temperature=0.0, max_tokens=200, guide=g) for g in guides]
            return await remote.generate([GenerationRequest(prompt, sp) for sp in sps])
        finally:
            await remote.close()

    as_json, as_call = asyncio.run(ask())
    jsonschema.validate(json.loads(as_json.text), SCHEMA)
    assert as_call.text.startswith('<tool_call>\n{"name": "read_file", "arguments": {"path": ')
    assert as_call.text.endswith("}}\n</tool_call>")
    bad = _post(server, {"prompt": "x", "structured_outputs": {"regex": "a+"}}, path="/v1/completions")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "structured_outputs"


@pytest.mark.parametrize("keep", [False, True])
def test_recorded_constrained_turns_lose_their_tokens_unless_kept(folder, tmp_path, keep):
    import sqlite3

    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app
    from inhabit.online.recorder import ServeRecorder

    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    recorder = ServeRecorder(tmp_path / "s.db", model=MODEL, keep_constrained=keep)
    app = create_app(engine, engine.tokenizer, model_name=MODEL, api_key="k", recorder=recorder)
    headers = {"Authorization": "Bearer k", "X-Inhabit-Session": "sess-1"}
    try:
        with BackgroundServer(app) as srv:
            for body in ({}, {"response_format": {"type": "json_object"}}):
                body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 8} | body
                r = httpx.post(srv.url + "/v1/chat/completions", json=body, headers=headers, timeout=60)
                assert r.status_code == 200, r.text
    finally:
        asyncio.run(engine.close())
        recorder.close()
    with sqlite3.connect(tmp_path / "s.db") as db:
        free, forced = (
            json.loads(b)["turn"] for (b,) in db.execute("SELECT turn FROM serve_turns ORDER BY seq")
        )
    assert "constrained" not in free and len(free["completion_token_ids"]) == 8
    assert forced["constrained"] is True
    assert (forced["completion_token_ids"] is not None) is keep and (forced["logprobs"] is not None) is keep


def test_guided_engine_that_does_not_stop_at_eos_still_ends_with_the_grammar(folder):
    """With `stop_at_eos = false` the grammar still ends on the model's EOS, and the request with it."""
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.constrained import Guide
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.engine import GenerationRequest, SamplingParams

    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0, stop_at_eos=False))
    prompt = engine.tokenizer("The weather:", add_special_tokens=False)["input_ids"]
    sp = SamplingParams(temperature=0.0, max_tokens=200, guide=Guide("json_schema", json.dumps(SCHEMA)))
    try:
        (c,) = asyncio.run(engine.generate([GenerationRequest(prompt, sp)]))
    finally:
        asyncio.run(engine.close())
    assert c.finish_reason == "stop" and c.token_ids[-1] in engine.eos_ids
    jsonschema.validate(json.loads(c.text), SCHEMA)
