"""Reasoning kept apart from answers: `--reasoning-parser qwen3|deepseek_r1`.

The parsers on their own (whole answers, and streams fed a character at a time, which must add
up to the whole split), then through `inhabit serve` on a Qwen3-style thinking template (the
generation prompt opens `<think>`, as Qwen3's does with thinking on): a tiny model trained to
answer with reasoning, then text, then a tool call. Chat Completions must give `reasoning_content`
apart, streamed as `delta.reasoning_content`, with the same content streamed or not (no "\\n\\n"
kept before the call), the call parsed from the content alone; Responses a `reasoning` item.
"""

from __future__ import annotations

import asyncio
import copy
import json

import httpx
import openai
import pytest
import torch
from test_server_tools import QWEN3_STYLE

from inhabit.inference.reasoning import ReasoningSplit, make_reasoning

THINKING = QWEN3_STYLE[: QWEN3_STYLE.rindex("{%- if add_generation_prompt %}")] + (
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}"
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
        },
    }
]
ASK = [{"role": "user", "content": "Fix calc.py"}]
TARGET = (
    "I need calc.py first.\n</think>\n\nLet me look.\n\n"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "calc.py"}}\n</tool_call><|im_end|>'
)
MODEL = "tiny-think"


@pytest.mark.parametrize(
    "name,opened,text,want",
    [
        ("qwen3", True, "Done.\n</think>\n\nIt is sunny.", ("Done.", "It is sunny.")),
        ("qwen3", False, "<think>\nhm\n</think>\n\nok", ("hm", "ok")),
        ("qwen3", False, "plain answer", (None, "plain answer")),
        ("qwen3", False, "<think>\ncut short", ("cut short", "")),
        ("qwen3", True, "cut short", ("cut short", "")),
        ("deepseek_r1", False, "never closed", ("never closed", "")),
        ("deepseek_r1", True, "r</think>a", ("r", "a")),
        ("qwen3", True, "\n</think>\n\nonly", (None, "only")),
    ],
)
def test_split_and_stream_agree(name, opened, text, want):
    fmt = make_reasoning(name)
    assert ReasoningSplit(fmt, opened).split(text) == want
    stream = ReasoningSplit(fmt, opened)
    reasoning, content = "", None
    for i in range(1, len(text) + 1):
        new, content = stream.feed(text[:i])
        reasoning += new
    whole_reasoning, whole_content = want
    assert reasoning == (whole_reasoning or "")[: len(reasoning)]
    assert content is None or whole_content.startswith(content)
    if "</think>" in text:  # closed: the stream has said all of it
        assert reasoning == (whole_reasoning or "") and content == whole_content


@pytest.fixture(scope="module")
def server(tmp_path_factory, tokenizer):
    from inhabit.inference.chat_tools import encode_plan, plan_chat
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.protocol import ChatRequest
    from inhabit.inference.server import BackgroundServer, create_app
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = THINKING
    model = build_tiny_model("dense-1m", vocab_size=len(tok), seed=0)
    plan = plan_chat(ChatRequest.model_validate({"model": MODEL, "messages": ASK, "tools": TOOLS}), "hermes")
    prompt = encode_plan(tok, plan)
    assert tok.decode(prompt).endswith("<|im_start|>assistant\n<think>\n")
    target = tok(TARGET, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([prompt + target])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(300):  # until greedy decoding writes the target
        out = model(input_ids=ids, labels=labels)
        if torch.equal(out.logits[0, len(prompt) - 1 : -1].argmax(-1), torch.tensor(target)):
            break
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    model.eval()
    folder = save_model_folder(model, tok, tmp_path_factory.mktemp("models") / MODEL)
    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    app = create_app(engine, engine.tokenizer, model_name=MODEL, reasoning_parser="qwen3")
    with BackgroundServer(app) as srv:
        yield srv
    asyncio.run(engine.close())


def _ask(client, **kw):
    body = dict(model=MODEL, messages=ASK, tools=TOOLS, temperature=0, max_tokens=80) | kw
    return client.chat.completions.create(**body)


def test_chat_separates_reasoning_and_parses_the_call_from_the_content(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    choice = _ask(client).choices[0]
    assert choice.message.model_extra["reasoning_content"] == "I need calc.py first."
    assert choice.message.content == "Let me look."
    assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == [
        ("read_file", {"path": "calc.py"})
    ]
    assert choice.finish_reason == "tool_calls"


def test_streamed_reasoning_and_content_match_the_whole_answer(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    whole = _ask(client).choices[0].message
    reasoning, content, calls = "", "", []
    for chunk in _ask(client, stream=True):
        delta = chunk.choices[0].delta
        reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
        content += delta.content or ""
        calls += [(d.function.name, d.function.arguments) for d in delta.tool_calls or []]
    assert reasoning == whole.model_extra["reasoning_content"]
    assert content == whole.content  # "Let me look.", without the "\n\n" before the call
    assert calls == [(c.function.name, c.function.arguments) for c in whole.tool_calls]


def test_responses_give_a_reasoning_item(server):
    body = {"model": MODEL, "input": ASK[0]["content"], "tools": [{"type": "function", **TOOLS[0]["function"]}],
            "temperature": 0, "max_output_tokens": 80}  # fmt: skip
    out = httpx.post(server.url + "/v1/responses", json=body, timeout=60).json()["output"]
    assert [item["type"] for item in out] == ["reasoning", "message", "function_call"]
    assert out[0]["content"][0]["text"] == "I need calc.py first."
    assert out[1]["content"][0]["text"] == "Let me look."


def test_streamed_responses_give_the_reasoning_item_first(server):
    """`responses.create(stream=True)`: a reasoning item streamed as reasoning_text deltas, closed
    before the message opens; the SDK's `responses.stream` assembles the same output as the whole
    answer."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    kw = dict(model=MODEL, input=ASK[0]["content"], tools=[{"type": "function", **TOOLS[0]["function"]}],
              temperature=0, max_output_tokens=80)  # fmt: skip
    whole = client.responses.create(**kw)
    events = list(client.responses.create(**kw, stream=True))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    kinds = [e.type for e in events]
    first_text = kinds.index("response.output_text.delta")
    assert (
        kinds.index("response.reasoning_text.delta")
        < kinds.index("response.reasoning_text.done")
        < first_text
    )
    added = [e.item.type for e in events if e.type == "response.output_item.added"]
    assert added == ["reasoning", "message", "function_call"]
    thinking = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
    assert thinking == "I need calc.py first." == whole.output[0].content[0].text
    (done,) = [e for e in events if e.type == "response.reasoning_text.done"]
    assert done.text == thinking and done.output_index == 0
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Let me look."
    with client.responses.stream(**kw) as stream:
        final = stream.get_final_response()
    assert _items(final) == _items(whole) == [
        ("reasoning", "I need calc.py first."), ("message", "Let me look."),
        ("function_call", 'read_file {"path": "calc.py"}'),
    ]  # fmt: skip


def _items(response) -> list[tuple[str, str]]:
    """Each output item's type and what it says."""
    out = []
    for o in response.output:
        said = f"{o.name} {o.arguments}" if o.type == "function_call" else o.content[0].text
        out.append((o.type, said))
    return out


def test_responses_take_their_reasoning_item_back_as_input(server):
    """An agent loop sends the answer's output items back, reasoning item first: it becomes the
    `reasoning_content` of that assistant turn (what Qwen3's template renders for the turns after
    the last user message), as chat's assistant messages carry it."""
    from inhabit.inference.chat_tools import plan_chat
    from inhabit.inference.responses import ResponsesRequest, to_chat

    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    kw = dict(
        model=MODEL, tools=[{"type": "function", **TOOLS[0]["function"]}], temperature=0, max_output_tokens=8
    )
    first = client.responses.create(input=ASK[0]["content"], **(kw | {"max_output_tokens": 80}))
    call = first.output[-1]
    follow_up = [
        {"role": "user", "content": ASK[0]["content"]},
        *[o.model_dump(exclude_none=True) for o in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "def add(a, b): return a - b"},
    ]
    again = client.responses.create(input=follow_up, **kw)
    assert again.status in ("completed", "incomplete")
    request = ResponsesRequest.model_validate({"model": MODEL, "input": follow_up})
    _user, turn, result = plan_chat(to_chat(request)[0], "hermes").messages
    assert turn["reasoning_content"] == "I need calc.py first." and turn["content"] == "Let me look."
    assert [c["function"]["name"] for c in turn["tool_calls"]] == ["read_file"] and result["role"] == "tool"


def test_streamed_responses_cut_while_thinking_hold_only_reasoning(server):
    """`max_output_tokens` runs out inside the reasoning: the whole answer and the stream both
    hold one reasoning item and no message."""
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
    kw = dict(model=MODEL, input=ASK[0]["content"], temperature=0, max_output_tokens=3)
    whole = client.responses.create(**kw)
    events = list(client.responses.create(**kw, stream=True))
    assert whole.status == "incomplete" and [o.type for o in whole.output] == ["reasoning"]
    assert events[-1].type == "response.incomplete"
    assert _items(events[-1].response) == _items(whole)
    assert "response.output_text.delta" not in [e.type for e in events]
