"""The OpenAI-compatible server on 127.0.0.1 with a tiny MoE model, driven by the real `openai` client."""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.protocol import decode_routes
from inhabit.inference.server import BackgroundServer, create_app

KEY = "test-key"


@pytest.fixture(scope="module")
def server(moe_folder):
    engine = EmbeddedEngine.from_path(moe_folder, EngineConfig(seed=0))
    app = create_app(
        engine, engine.tokenizer, model_name="tiny-moe", api_key=KEY, max_upload_bytes=50_000_000
    )
    with BackgroundServer(app) as srv:
        srv.engine = engine
        yield srv
    import asyncio

    asyncio.run(engine.close())


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=60)


MESSAGES = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix calc.py"}]


def test_models_and_auth(client, server):
    assert [m.id for m in client.models.list().data] == ["tiny-moe"]
    bad = openai.OpenAI(base_url=server.url + "/v1", api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_chat_with_logprobs_and_rl_fields(client, server):
    from inhabit.models.routing import RoutingCapture, RoutingReplay, layer_major

    resp = client.chat.completions.create(
        model="tiny-moe",
        messages=MESSAGES,
        max_tokens=12,
        temperature=0.7,
        seed=5,
        logprobs=True,
        top_logprobs=3,
    )
    choice = resp.choices[0]
    extra = choice.model_extra
    ids, versions = extra["token_ids"], extra["policy_versions"]
    prompt = resp.model_extra["prompt_token_ids"]
    assert len(ids) == resp.usage.completion_tokens and versions == [server.engine.version] * len(ids)
    assert [t.logprob for t in choice.logprobs.content] and len(choice.logprobs.content) == len(ids)
    assert all(len(t.top_logprobs) == 3 for t in choice.logprobs.content)
    assert choice.message.content == server.engine.tokenizer.decode(ids, skip_special_tokens=True)
    # Routed experts come back for positions 0..N-2 and replay exactly in one full forward.
    prompt_routes, routes = decode_routes(extra["routed_experts"], len(prompt))
    assert len(prompt_routes) == len(prompt) - 1 and len(routes) == len(ids)
    model = server.engine.model
    full = torch.tensor([prompt + ids])
    recorded = layer_major(prompt_routes + routes)
    with torch.inference_mode(), RoutingCapture(model) as cap:
        free_logits = model(full).logits[0]
    assert torch.equal(cap.expert_ids(0)[:, : recorded.shape[1]], recorded)
    free_last = torch.full((recorded.shape[0], 1, recorded.shape[2]), -1)
    with torch.inference_mode(), RoutingReplay(model, torch.cat([recorded, free_last], 1)):
        replay_logits = model(full).logits[0]
    lp = torch.log_softmax(replay_logits[len(prompt) - 1 : -1] / 0.7, -1)
    got = lp.gather(1, torch.tensor(ids)[:, None]).squeeze(1)
    want = torch.tensor([t.logprob for t in choice.logprobs.content])
    assert (got - want).abs().max() < 1e-4
    assert torch.allclose(free_logits, replay_logits, atol=1e-5)


def test_streaming_chat_matches_non_streaming(client):
    kw = dict(model="tiny-moe", messages=MESSAGES, max_tokens=16, temperature=1.0, seed=11)
    whole = client.chat.completions.create(**kw)
    chunks = list(
        client.chat.completions.create(
            **kw, stream=True, logprobs=True, stream_options={"include_usage": True}
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    ids = [t for c in chunks if c.choices for t in c.choices[0].model_extra.get("token_ids") or []]
    assert text == whole.choices[0].message.content
    assert ids == whole.choices[0].model_extra["token_ids"]
    finals = [c for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(finals) == 1 and finals[0].choices[0].finish_reason == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == len(ids)


def test_streaming_n_choices_match_non_streaming(client):
    """n > 1 streams every choice (its own index), each one what the same request without
    streaming returns for that index; usage counts them all."""
    kw = dict(model="tiny-moe", messages=MESSAGES, max_tokens=12, temperature=1.0, seed=5, n=3)
    whole = client.chat.completions.create(**kw)
    chunks = list(client.chat.completions.create(**kw, stream=True, stream_options={"include_usage": True}))
    text: dict[int, str] = {}
    ids: dict[int, list[int]] = {}
    finals: dict[int, str] = {}
    for c in chunks:
        for ch in c.choices:
            text[ch.index] = text.get(ch.index, "") + (ch.delta.content or "")
            ids.setdefault(ch.index, []).extend(ch.model_extra.get("token_ids") or [])
            if ch.finish_reason:
                finals[ch.index] = ch.finish_reason
    assert sorted(text) == [0, 1, 2]
    for want in whole.choices:
        assert text[want.index] == want.message.content
        assert ids[want.index] == want.model_extra["token_ids"]
        assert finals[want.index] == want.finish_reason
    assert len({tuple(v) for v in ids.values()}) > 1  # the choices are distinct samples
    assert chunks[-1].usage.completion_tokens == sum(len(v) for v in ids.values())
    completions = list(
        client.completions.create(model="tiny-moe", prompt="x = 1", max_tokens=4, n=2, stream=True)
    )
    assert {ch.index for c in completions for ch in c.choices} == {0, 1}


def test_penalties_and_logit_bias_are_applied_and_flagged(client, server):
    """logit_bias +100 on one token makes every sampled token that one, with logprob ~0 (the
    adjusted distribution's, not the model's); the choice says its sampling was adjusted."""
    tok = server.engine.tokenizer.convert_tokens_to_ids("x")
    kw = dict(model="tiny-moe", messages=MESSAGES, max_tokens=6, temperature=1.0, seed=2, logprobs=True)
    biased = client.chat.completions.create(**kw, logit_bias={str(tok): 100})
    choice = biased.choices[0]
    assert choice.model_extra["token_ids"] == [tok] * 6 and choice.model_extra["sampling_adjusted"] is True
    assert all(t.logprob > -1e-3 for t in choice.logprobs.content)
    plain = client.chat.completions.create(**kw).choices[0]
    assert "sampling_adjusted" not in plain.model_extra
    # A +20 bias alone keeps the token every time; a frequency penalty of 2 per repeat wears it down.
    long = kw | {"max_tokens": 12, "logit_bias": {str(tok): 20}}
    kept = client.chat.completions.create(**long).choices[0].model_extra["token_ids"]
    worn = client.chat.completions.create(**long, frequency_penalty=2.0).choices[0].model_extra["token_ids"]
    assert kept == [tok] * 12 and worn[0] == tok and worn.count(tok) < 12
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(**kw, logit_bias={str(10**9): 1})
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(**kw, presence_penalty=3)


def test_completions_with_token_prompts_and_stop(client, server):
    tok = server.engine.tokenizer
    prompt = tok("def add(a, b):", add_special_tokens=False)["input_ids"]
    free = client.completions.create(model="tiny-moe", prompt=prompt, max_tokens=10, seed=3, logprobs=0)
    c = free.choices[0]
    assert c.model_extra["prompt_token_ids"] == prompt
    assert len(c.logprobs.token_logprobs) == len(c.model_extra["token_ids"])
    two = client.completions.create(model="tiny-moe", prompt=["x = 1", "y = 2"], max_tokens=4, n=2, seed=1)
    assert len(two.choices) == 4
    stop = c.text[3:6]
    if stop.strip():
        stopped = client.completions.create(
            model="tiny-moe", prompt=prompt, max_tokens=10, seed=3, stop=[stop]
        )
        assert stop not in stopped.choices[0].text and stopped.choices[0].finish_reason == "stop"


def test_openai_style_errors(client, server):
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(model="other", messages=MESSAGES)
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="tiny-moe", messages=MESSAGES, temperature=5)
    assert e.value.body["type"] == "invalid_request_error" and "temperature" in e.value.body["message"]
    r = httpx.post(server.url + "/v1/chat/completions", json={"model": "tiny-moe"}, headers=_auth())
    assert r.status_code == 400 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    r = httpx.post(
        server.url + "/v1/completions", json={"model": "tiny-moe", "prompt": [1] * 10_000}, headers=_auth()
    )
    assert r.status_code == 400 and r.json()["error"]["code"] == "context_length_exceeded"


def test_weight_reload_changes_version(client, server, moe_folder, moe_folder_b):
    kw = dict(model="tiny-moe", messages=MESSAGES, max_tokens=8, temperature=0.0, logprobs=True)

    def lps(choice):
        return [t.logprob for t in choice.logprobs.content]

    first = client.chat.completions.create(**kw).choices[0]
    before = first.model_extra
    r = httpx.post(server.url + "/v1/load_weights", json={"path": str(moe_folder_b), "version": 3})
    assert r.status_code == 401
    r = httpx.post(
        server.url + "/v1/load_weights", json={"path": str(moe_folder_b), "version": 3}, headers=_auth()
    )
    assert r.status_code == 200 and r.json()["version"] == 3
    second = client.chat.completions.create(**kw).choices[0]
    after = second.model_extra
    assert after["policy_versions"] == [3] * len(after["token_ids"])
    assert after["token_ids"] != before["token_ids"] or lps(second) != lps(first)
    # A safetensors upload of the original weights brings the original answers back.
    data = (moe_folder / "model.safetensors").read_bytes()
    r = httpx.post(
        server.url + "/v1/load_weights?version=4",
        content=data,
        headers=_auth() | {"content-type": "application/octet-stream"},
        timeout=60,
    )
    assert r.status_code == 200, r.text
    third = client.chat.completions.create(**kw).choices[0]
    again = third.model_extra
    assert again["token_ids"] == before["token_ids"] and set(again["policy_versions"]) == {4}
    assert lps(third) == pytest.approx(lps(first), abs=1e-5)
    r = httpx.post(server.url + "/v1/load_weights?version=5", content=b"junk", headers=_auth())
    assert r.status_code == 400 and "safetensors" in r.json()["error"]["message"]


def _auth() -> dict:
    return {"authorization": f"Bearer {KEY}"}


def test_streaming_completions_never_send_the_stop_string(client, server):
    tok = server.engine.tokenizer
    prompt = tok("class Foo:\n    ", add_special_tokens=False)["input_ids"]
    kw = dict(model="tiny-moe", prompt=prompt, max_tokens=24, seed=7)
    free = client.completions.create(**kw).choices[0].text
    stop = free[4:7]
    if not stop.strip():
        pytest.skip("sampled text has no usable stop string")
    whole = client.completions.create(**kw, stop=[stop]).choices[0]
    chunks = list(client.completions.create(**kw, stop=[stop], stream=True))
    text = "".join(c.choices[0].text for c in chunks)
    assert text == whole.text and stop not in text
    assert chunks[-1].choices[0].finish_reason == whole.finish_reason == "stop"


def test_without_api_key_weight_loading_is_disabled(server, moe_folder):
    app = create_app(server.engine, server.engine.tokenizer, model_name="open")
    with BackgroundServer(app) as open_srv:
        assert httpx.get(open_srv.url + "/v1/models").json()["data"][0]["id"] == "open"
        r = httpx.post(open_srv.url + "/v1/load_weights", json={"path": str(moe_folder), "version": 9})
        assert r.status_code == 403 and r.json()["error"]["type"] == "permission_error"
        assert httpx.get(open_srv.url + "/nope").json()["error"]["message"]
