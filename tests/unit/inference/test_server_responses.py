"""`POST /v1/responses` through the real `openai` client (`client.responses.create`), streaming and
not, with function tools and a `function_call_output` turn.

The model is test_server_tools.py's: the dense-1m model trained to answer its request with two
parallel `<tool_call>`s under a Qwen3-style chat template. A Responses request must reach the
model as exactly the prompt the equivalent chat request renders, and come back as the same calls.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from test_server_tools import MESSAGES, MODEL, TOOLS, _prompt_ids, folder, server  # noqa: F401

# The same tools in the Responses API's flat shape.
FLAT_TOOLS = [{"type": "function", **t["function"]} for t in TOOLS]
INSTRUCTIONS, USER = MESSAGES[0]["content"], MESSAGES[1]["content"]


@pytest.fixture
def client(server):  # noqa: F811
    return openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, timeout=60)


def _create(client, **kw):
    body = dict(model=MODEL, instructions=INSTRUCTIONS, input=USER, tools=FLAT_TOOLS, temperature=0)
    return client.responses.create(**(body | {"max_output_tokens": 80} | kw))


def test_function_calls_with_rl_fields(client, server):  # noqa: F811
    resp = _create(client, include=["message.output_text.logprobs"])
    assert resp.status == "completed" and resp.store is False
    calls = [(o.name, json.loads(o.arguments)) for o in resp.output if o.type == "function_call"]
    assert calls == [("read_file", {"path": "calc.py"}), ("run", {"cmd": "pytest -q"})]
    assert [o.type for o in resp.output] == ["function_call", "function_call"]
    assert len({o.call_id for o in resp.output}) == 2
    extra = resp.model_extra
    chat_prompt = _prompt_ids(server.engine.tokenizer, {"model": MODEL, "messages": MESSAGES, "tools": TOOLS})
    assert extra["prompt_token_ids"] == chat_prompt  # the same prompt as the chat request
    ids = extra["token_ids"]
    assert len(ids) == len(extra["token_logprobs"]) == resp.usage.output_tokens
    assert extra["policy_versions"] == [server.engine.version] * len(ids)
    assert resp.usage.input_tokens == len(chat_prompt)


def test_streaming_events_assemble_the_same_calls(client):
    whole = _create(client)
    events = list(_create(client, stream=True))
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"] and kinds[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    args: dict[str, str] = {}
    for e in events:
        if e.type == "response.function_call_arguments.delta":
            args[e.item_id] = args.get(e.item_id, "") + e.delta
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [(i.name, args[i.id]) for i in done] == [(o.name, o.arguments) for o in whole.output]
    final = events[-1].response
    assert [(o.name, o.arguments, o.call_id) for o in final.output] == [
        (i.name, i.arguments, i.call_id) for i in done
    ]
    assert final.model_extra["token_ids"] == whole.model_extra["token_ids"]


def test_function_call_output_turn_renders_like_chat(client, server):  # noqa: F811
    first = _create(client)
    calls = [o for o in first.output if o.type == "function_call"]
    results = ["def add(a, b): return a - b", "1 failed"]
    items = [
        {"role": "user", "content": [{"type": "input_text", "text": USER}]},
        *[
            {"type": "function_call", "call_id": c.call_id, "name": c.name, "arguments": c.arguments}
            for c in calls
        ],
        *[
            {"type": "function_call_output", "call_id": c.call_id, "output": r}
            for c, r in zip(calls, results, strict=True)
        ],
    ]
    resp = _create(client, input=items, max_output_tokens=4)
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in calls
            ],
        },
        *[
            {"role": "tool", "tool_call_id": c.call_id, "content": r}
            for c, r in zip(calls, results, strict=True)
        ],
    ]
    want = _prompt_ids(server.engine.tokenizer, {"model": MODEL, "messages": history, "tools": TOOLS})
    assert resp.model_extra["prompt_token_ids"] == want
    assert resp.status == "incomplete" and resp.incomplete_details.reason == "max_output_tokens"


def test_text_streams_as_output_text_deltas(client):
    events = list(
        _create(
            client, tools=None, stream=True, max_output_tokens=12, include=["message.output_text.logprobs"]
        )
    )
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1]
    assert final.type == "response.incomplete"
    (message,) = final.response.output
    assert message.type == "message" and message.content[0].text == text
    lps = [lp for e in events if e.type == "response.output_text.delta" for lp in e.logprobs]
    assert [lp.logprob for lp in lps] == final.response.model_extra["token_logprobs"]
    assert {"response.output_text.done", "response.content_part.done"} <= {e.type for e in events}


def _post(server, body: dict) -> httpx.Response:  # noqa: F811
    body = {"model": MODEL, "input": USER, "max_output_tokens": 4} | body
    return httpx.post(server.url + "/v1/responses", json=body, headers={"Authorization": "Bearer k"})


@pytest.mark.parametrize(
    "body,param,words",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id", "stores no responses"),
        ({"tools": [{"type": "web_search"}]}, "tools.0", "function tools only"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content.0",
            "text parts only",
        ),
        ({"text": {"format": {"type": "grammar"}}}, "text.format", "not supported"),
        (
            {"text": {"format": {"type": "json_schema", "schema": {"type": 5}}}},
            "text.format",
            "JSON Schema cannot be used: Type should be a string",
        ),
        ({"tool_choice": "sometimes"}, "tool_choice", "tool_choice"),
        ({"input": [{"type": "web_search_call", "id": "w"}]}, "input.0.type", "function_call_output"),
        ({"input": [{"type": "reasoning", "content": "hm"}]}, "input.0.content", "text parts"),
        (
            {"input": [{"type": "function_call_output", "call_id": "nope", "output": "x"}]},
            "input.0",
            "no earlier assistant",
        ),
    ],
)
def test_bad_requests_are_400(server, body, param, words):  # noqa: F811
    r = _post(server, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"], err


def test_unknown_model_and_auth(server):  # noqa: F811
    assert _post(server, {"model": "other"}).status_code == 404
    r = httpx.post(server.url + "/v1/responses", json={"model": MODEL, "input": "hi"})
    assert r.status_code == 401
