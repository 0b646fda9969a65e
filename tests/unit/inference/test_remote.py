"""RemoteEngine against our own server on 127.0.0.1: same answers as the embedded engine, retries, swaps."""

from __future__ import annotations

import asyncio

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.inference.errors import RemoteEngineError
from inhabit.inference.mismatch import measure_mismatch
from inhabit.inference.remote import RemoteConfig, RemoteEngine
from inhabit.inference.server import BackgroundServer, create_app

KEY = "k"


@pytest.fixture(scope="module")
def served(moe_folder):
    engine = EmbeddedEngine.from_path(moe_folder, EngineConfig(stop_at_eos=False))
    with BackgroundServer(create_app(engine, engine.tokenizer, model_name="m", api_key=KEY)) as srv:
        yield srv, engine
    asyncio.run(engine.close())


async def test_remote_matches_the_engine_it_fronts(served, prompts):
    srv, engine = served
    remote = RemoteEngine(RemoteConfig(base_url=srv.url, api_key=KEY, max_concurrency=2))
    reqs = [
        GenerationRequest(
            p, SamplingParams(max_tokens=10, seed=i, temperature=0.9, top_logprobs=2), request_id=str(i)
        )
        for i, p in enumerate(prompts)
    ]
    try:
        got = await remote.generate(reqs)
    finally:
        await remote.close()
    assert [c.request_id for c in got] == [r.request_id for r in reqs]
    for c, p in zip(got, prompts, strict=True):
        assert c.finish_reason == "length" and c.prompt_token_ids == p and len(c.token_ids) == 10
        assert c.versions == [engine.version] * 10 and len(c.routed_experts) == 10
        assert len(c.prompt_routed_experts) == len(p) - 1
        assert all(len(t) == 2 and -1 not in t for t in c.top_logprobs)
    report = measure_mismatch(engine.model, got, temperatures=0.9)
    assert report.max_abs_diff < 1e-4 and report.routing_disagreement == 0.0


async def test_remote_forwards_penalties_and_logit_bias(served, prompts):
    """A penalized, biased request through RemoteEngine samples what the engine itself does."""
    srv, engine = served
    sp = SamplingParams(
        max_tokens=8,
        seed=3,
        temperature=0.9,
        presence_penalty=0.5,
        frequency_penalty=1.0,
        logit_bias=((7, 4.0),),
    )
    req = GenerationRequest(prompts[0], sp, request_id="adjusted")
    remote = RemoteEngine(RemoteConfig(base_url=srv.url, api_key=KEY))
    try:
        (got,) = await remote.generate([req])
    finally:
        await remote.close()
    (want,) = await engine.generate([req])
    (plain,) = await engine.generate(
        [GenerationRequest(prompts[0], SamplingParams(max_tokens=8, seed=3, temperature=0.9))]
    )
    assert got.token_ids == want.token_ids != plain.token_ids
    assert max(abs(a - b) for a, b in zip(got.logprobs, want.logprobs, strict=True)) < 1e-5


async def test_remote_weight_updates(served, moe_folder, moe_folder_b, prompts):
    srv, engine = served
    remote = RemoteEngine(RemoteConfig(base_url=srv.url, api_key=KEY))
    try:
        await remote.load_weights(moe_folder_b, version=5)
        assert remote.version == 5 and engine.version == 5
        from inhabit.inference.weights_io import read_state_dict

        await remote.load_weights(read_state_dict(moe_folder), version=6)  # uploaded as safetensors
        (c,) = await remote.generate([GenerationRequest(prompts[0], SamplingParams(max_tokens=3))])
        assert c.versions == [6, 6, 6] and engine.version == 6
        bad = RemoteEngine(RemoteConfig(base_url=srv.url, api_key="nope", retries=0))
        with pytest.raises(RemoteEngineError):
            await bad.generate([GenerationRequest(prompts[0])])
        await bad.close()
    finally:
        await remote.close()


async def test_retries_then_failed_completion_is_data():
    calls = {"n": 0}
    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"data": [{"id": "x"}]}

    @app.post("/v1/completions")
    async def flaky():
        calls["n"] += 1
        if calls["n"] < 3:
            return JSONResponse({"error": {"message": "busy"}}, status_code=503)
        return {
            "choices": [
                {
                    "text": "hi",
                    "token_ids": [7],
                    "logprobs": {"token_logprobs": [-0.5]},
                    "finish_reason": "stop",
                }
            ]
        }

    with BackgroundServer(app) as srv:
        remote = RemoteEngine(RemoteConfig(base_url=srv.url, retries=3, backoff_s=0.01))
        (ok,) = await remote.generate([GenerationRequest([1, 2])])
        assert calls["n"] == 3 and ok.token_ids == [7] and ok.logprobs == [-0.5] and ok.versions == [0]
        calls["n"] = -100  # fail more often than we retry
        (failed,) = await remote.generate([GenerationRequest([1, 2])])
        assert failed.finish_reason == "error" and "503" in failed.error
        await remote.close()
    # Nothing listening: transport errors become failed completions too.
    remote = RemoteEngine(RemoteConfig(base_url="http://127.0.0.1:9", model="x", retries=1, backoff_s=0.01))
    (c,) = await remote.generate([GenerationRequest([1])])
    assert c.finish_reason == "error"
    await remote.close()


async def test_sglang_flavor_speaks_generate_and_update_from_disk():
    """A stand-in answering as SGLang's native API documents (no SGLang build runs on this CPU)."""
    seen: dict = {}
    app = FastAPI()

    @app.post("/generate")
    async def generate(body: dict):
        seen["generate"] = body
        return {
            "text": "ab",
            "output_ids": [11, 12],
            "meta_info": {
                "finish_reason": {"type": "length", "length": 2},
                "output_token_logprobs": [[-0.1, 11, None], [-0.2, 12, None]],
            },
        }

    @app.post("/update_weights_from_disk")
    async def update(body: dict):
        seen["update"] = body
        return {"success": body["model_path"] != "/bad", "message": "no such folder"}

    with BackgroundServer(app) as srv:
        remote = RemoteEngine(RemoteConfig(base_url=srv.url, flavor="sglang", retries=0))
        req = GenerationRequest([1, 2, 3], SamplingParams(max_tokens=2, temperature=0.5, seed=4, stop=("x",)))
        (c,) = await remote.generate([req])
        assert seen["generate"]["input_ids"] == [1, 2, 3] and seen["generate"]["return_logprob"] is True
        sp = seen["generate"]["sampling_params"]
        assert sp["max_new_tokens"] == 2 and sp["temperature"] == 0.5 and sp["stop"] == ["x"]
        assert sp["sampling_seed"] == 4 and "max_tokens" not in sp and "seed" not in sp  # SGLang's names
        assert c.token_ids == [11, 12] and c.logprobs == [-0.1, -0.2] and c.finish_reason == "length"
        await remote.load_weights("/models/v1", version=1)
        assert seen["update"] == {"model_path": "/models/v1"} and remote.version == 1
        with pytest.raises(RemoteEngineError, match="refused"):
            await remote.load_weights("/bad", version=2)
        assert remote.version == 1
        await remote.close()


async def test_vllm_backend_sends_each_constraint_as_structured_outputs(tmp_path):
    """What the vLLM backend sends for a client's `response_format` (json_schema strict, as the
    openai SDK's `parse(response_format=Model)` writes it, and json_object), the Responses API's
    `text.format`, and a named `tool_choice`: the server's plans of those requests, generated by a
    `VLLMEngine` whose server is a stand-in answering as vLLM's `/v1/completions` does."""
    from inhabit.inference.chat_tools import plan_chat
    from inhabit.inference.constrained import tool_call_guide
    from inhabit.inference.protocol import ChatRequest
    from inhabit.inference.responses import ResponsesRequest, to_chat
    from inhabit.inference.vllm_backend import VLLMConfig, VLLMEngine, VLLMServer

    schema = {
        "type": "object",
        "properties": {"celsius": {"type": "integer", "maximum": 50}, "sky": {"enum": ["clear", "grey"]}},
        "required": ["celsius", "sky"],
        "additionalProperties": False,
    }
    tools = [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}]
    ask = {"model": "m", "messages": [{"role": "user", "content": "weather?"}]}
    chats = [
        ask | {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": schema, "strict": True}}},
        ask | {"response_format": {"type": "json_object"}},
        ask | {"tools": tools, "tool_choice": {"type": "function", "function": {"name": "run"}}},
    ]  # fmt: skip
    plans = [plan_chat(ChatRequest.model_validate(c), "hermes") for c in chats]
    responses = ResponsesRequest.model_validate(
        {"model": "m", "input": "weather?", "text": {"format": {"type": "json_schema", "name": "w", "schema": schema}}}
    )  # fmt: skip
    plans.append(plan_chat(to_chat(responses)[0], "hermes"))

    seen: list[dict] = []
    app = FastAPI()

    @app.post("/v1/completions")
    async def completions(body: dict):
        seen.append(body)
        return {"choices": [{"text": "{}", "token_ids": [7, 8], "logprobs": {"token_logprobs": [-0.1, -0.2]},
                             "finish_reason": "stop", "prompt_token_ids": body["prompt"]}]}  # fmt: skip

    with BackgroundServer(app) as srv:
        remote = RemoteEngine(RemoteConfig(base_url=srv.url, flavor="vllm", model="m", retries=0))
        engine = VLLMEngine(VLLMServer(VLLMConfig(model=str(tmp_path))), remote)
        # Each request's max_tokens names it (the four go out at once, in any order).
        reqs = [
            GenerationRequest([1, 2], SamplingParams(max_tokens=9 + i, guide=p.guide))
            for i, p in enumerate(plans)
        ]
        outs = await engine.generate(reqs)
        await engine.close()
    assert [c.token_ids for c in outs] == [[7, 8]] * 4 and all(c.finish_reason == "stop" for c in outs)
    sent = [body["structured_outputs"] for body in sorted(seen, key=lambda body: body["max_tokens"])]
    assert sent[0] == {"json": schema, "disable_any_whitespace": True, "disable_additional_properties": True}
    assert sent[1] == {"json_object": True, "disable_any_whitespace": True}
    assert sent[2] == {"grammar": tool_call_guide(tools, ["run"], "hermes", parallel=True).spec}
    assert sent[3] == {"json": schema, "disable_any_whitespace": True, "disable_additional_properties": False}
    assert all(body["prompt"] == [1, 2] and body["return_token_ids"] for body in seen)
