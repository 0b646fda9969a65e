"""OpenAI tool calling through `inhabit serve`, driven by the real `openai` client on loopback.

The model folder is written here: the project tokenizer with `<|im_start|>`/`<|im_end|>` added
and a chat template in the style of Qwen3's published one (a `<tools>` block in the system turn,
`<tool_call>` JSON, `<tool_response>` turns), so the server detects the `hermes` parser. A random
tiny model writes no tool calls, so the dense-1m model is first trained (Adam steps, loss on the completion
only, until its greedy choice is the target at every position) to answer one request with two parallel calls; greedy decoding then
writes them, and the test checks what the server makes of that text: nothing of ours is mocked.
"""

from __future__ import annotations

import asyncio
import copy
import json

import httpx
import openai
import pytest
import torch

QWEN3_STYLE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{{- '<|im_start|>assistant\\n' + message.content }}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- if loop.first and message.content or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{%- set tc = tool_call.function %}"
    '{{- \'<tool_call>\\n{"name": "\' + tc.name + \'", "arguments": \' }}'
    "{%- if tc.arguments is string %}{{- tc.arguments }}{%- else %}{{- tc.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    },
]
MESSAGES = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix calc.py"}]
TARGET = (
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "run", "arguments": {"cmd": "pytest -q"}}\n</tool_call><|im_end|>'
)
MODEL = "tiny-tools"


def _prompt_ids(tok, body: dict) -> list[int]:
    """The prompt exactly as the server builds it (the same planning and rendering code)."""
    from inhabit.inference.chat_tools import encode_plan, plan_chat
    from inhabit.inference.protocol import ChatRequest

    return encode_plan(tok, plan_chat(ChatRequest.model_validate(body), "hermes"))


@pytest.fixture(scope="module")
def folder(tmp_path_factory, tokenizer):
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = QWEN3_STYLE
    model = build_tiny_model("dense-1m", vocab_size=len(tok), seed=0)
    prompt = _prompt_ids(tok, {"model": MODEL, "messages": MESSAGES, "tools": TOOLS})
    target = tok(TARGET, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + target])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    want = torch.tensor(target)
    for _ in range(300):  # until greedy decoding writes the target (about a hundred steps)
        out = model(input_ids=ids, labels=labels)
        if torch.equal(out.logits[0, len(prompt) - 1 : -1].argmax(-1), want):
            break
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    model.eval()
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


def _ask(client, **kw):
    body = dict(model=MODEL, messages=MESSAGES, tools=TOOLS, temperature=0, max_tokens=80) | kw
    return client.chat.completions.create(**body)


def test_parallel_tool_calls_with_rl_fields(client, server):
    resp = _ask(client, logprobs=True)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    calls = choice.message.tool_calls
    assert [(c.function.name, json.loads(c.function.arguments)) for c in calls] == [
        ("read_file", {"path": "calc.py"}),
        ("run", {"cmd": "pytest -q"}),
    ]
    assert len({c.id for c in calls}) == 2 and all(c.type == "function" for c in calls)
    ids = choice.model_extra["token_ids"]
    assert len(choice.logprobs.content) == len(ids) == resp.usage.completion_tokens
    assert choice.model_extra["policy_versions"] == [server.engine.version] * len(ids)
    # The template's tools block is what the model saw.
    prompt = server.engine.tokenizer.decode(resp.model_extra["prompt_token_ids"])
    assert "<tools>\n" + json.dumps(TOOLS[0]) in prompt and prompt.endswith("<|im_start|>assistant\n")


def test_streaming_assembles_the_same_calls(client):
    whole = _ask(client)
    chunks = list(_ask(client, stream=True))
    calls: dict[int, dict] = {}
    for ch in chunks:
        for d in ch.choices[0].delta.tool_calls or []:
            entry = calls.setdefault(d.index, {"id": d.id, "name": "", "arguments": ""})
            entry["name"] += d.function.name or ""
            entry["arguments"] += d.function.arguments or ""
    want = [(c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls]
    assert [(calls[i]["name"], calls[i]["arguments"]) for i in sorted(calls)] == want
    assert [c.choices[0].finish_reason for c in chunks if c.choices[0].finish_reason] == ["tool_calls"]
    ids = [t for c in chunks for t in c.choices[0].model_extra.get("token_ids") or []]
    assert ids == whole.choices[0].model_extra["token_ids"]
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == ""


def test_tool_choice_none_and_parallel_off(client):
    none = _ask(client, tool_choice="none").choices[0]
    assert none.message.tool_calls is None and "<tool_call>" in none.message.content
    assert none.finish_reason == "stop"
    one = _ask(client, parallel_tool_calls=False).choices[0]
    assert [c.function.name for c in one.message.tool_calls] == ["read_file"]
    named = _ask(client, tool_choice={"type": "function", "function": {"name": "run"}}).choices[0]
    # Constrained: the model was trained to call read_file first; the grammar lets it call run only.
    assert [c.function.name for c in named.message.tool_calls] == ["run", "run"]


def test_tool_choice_required_cut_short_returns_the_text(client):
    """`required` forces a call (test_constrained.py), but 8 tokens are too few for a complete one:
    the answer holds none, and the call's opening comes back as `content` with "length"."""
    resp = _ask(client, tool_choice="required", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    choice = resp.choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "length"
    assert choice.message.content.startswith("<tool_call>")
    assert len(choice.model_extra["token_ids"]) == 8


def test_tool_results_render_through_the_template(client, server):
    first = _ask(client).choices[0].message
    history = [
        *MESSAGES,
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": first.tool_calls[0].id, "content": "def add(a, b): return a - b"},
        {"role": "tool", "tool_call_id": first.tool_calls[1].id, "content": "1 failed"},
    ]
    resp = _ask(client, messages=history, max_tokens=4)
    prompt = server.engine.tokenizer.decode(resp.model_extra["prompt_token_ids"])
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n'
        "</tool_call>\n<tool_call>\n"
    ) in prompt
    assert (
        "<|im_start|>user\n<tool_response>\ndef add(a, b): return a - b\n</tool_response>\n"
        "<tool_response>\n1 failed\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    ) in prompt
    assert resp.model_extra["prompt_token_ids"] == _prompt_ids(
        server.engine.tokenizer, {"model": MODEL, "messages": history, "tools": TOOLS}
    )


def test_developer_role_text_parts_and_model_card(client, server):
    parts = [{"type": "text", "text": "Fix "}, {"type": "text", "text": "calc.py"}]
    a = _ask(
        client,
        messages=[{"role": "developer", "content": "You fix bugs."}, {"role": "user", "content": parts}],
    )
    b = _ask(client)
    assert a.model_extra["prompt_token_ids"] == b.model_extra["prompt_token_ids"]
    card = client.models.retrieve(MODEL)
    assert card.id == MODEL and card.model_extra["tool_call_parser"] == "hermes"
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("other")


def _post(server, body: dict) -> httpx.Response:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 4} | body
    return httpx.post(server.url + "/v1/chat/completions", json=body, headers={"Authorization": "Bearer k"})


CALL = {"id": "call_1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "a"}'}}


@pytest.mark.parametrize(
    "body,param,words",
    [
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 7}}}]},
            "tools.0.function.parameters",
            "not a valid JSON Schema",
        ),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "not among the request's tools",
        ),
        (
            {"messages": [*MESSAGES, {"role": "tool", "tool_call_id": "x", "content": "hi"}]},
            "messages.2.tool_call_id",
            "no earlier assistant",
        ),
        (
            {
                "messages": [
                    *MESSAGES,
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [CALL | {"function": {"name": "read_file", "arguments": "{path"}}],
                    },
                ]
            },
            "messages.2.tool_calls.0.function.arguments",
            "is not JSON",
        ),
        (
            {"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]},
            "messages.0.content.0",
            "text parts only",
        ),
        ({"messages": [{"role": "user", "content": None}]}, "messages.0.content", "no content"),
        ({"tool_choice": "required"}, "tool_choice", "needs `tools`"),
    ],
)
def test_bad_tool_requests_are_400(server, body, param, words):
    r = _post(server, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["param"] == param and words in err["message"] and err["type"] == "invalid_request_error"


def test_unknown_response_format_is_refused_not_ignored(server):
    r = _post(server, {"response_format": {"type": "regex"}})
    assert r.status_code == 400, r.text
    assert "response_format" in r.json()["error"]["message"]
    assert _post(server, {"response_format": {"type": "text"}}).status_code == 200


def test_server_without_a_parser_refuses_tools(folder, tokenizer):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    app = create_app(engine, engine.tokenizer, model_name=MODEL, tool_call_parser=None)
    try:
        with BackgroundServer(app) as srv:
            r = _post(srv, {"tools": TOOLS})
            assert r.status_code == 400 and "--tool-call-parser" in r.json()["error"]["message"]
            assert _post(srv, {}).status_code == 200  # plain chat still works
    finally:
        asyncio.run(engine.close())
