"""Tool-call parsers on recorded model text: parallel calls, malformed JSON, closing tags inside
arguments, and streaming split at every character giving the same calls and content."""

from __future__ import annotations

import json

import pytest

from inhabit.inference.tool_parsers import StreamingToolText, detect_parser, make_parser

SCHEMAS = {
    "read_file": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "start_line": {"type": "integer"}},
    },
    "run": {"type": "object", "properties": {"cmd": {"type": "string"}, "flags": {"type": "object"}}},
}

HERMES = (
    "I'll look at both.\n"
    '<tool_call>\n{"name": "read_file", "arguments": {"path": "calc.py", "start_line": 3}}\n</tool_call>\n'
    '<tool_call>\n{"name": "run", "arguments": {"cmd": "echo \'</tool_call>\'"}}\n</tool_call>'
)
CODER = (
    "<tool_call>\n<function=read_file>\n<parameter=path>\ncalc.py\n</parameter>\n"
    "<parameter=start_line>\n3\n</parameter>\n</function>\n</tool_call>\n"
    "<tool_call>\n<function=run>\n<parameter=cmd>\nls\n</parameter>\n"
    '<parameter=flags>\n{"all": true}\n</parameter>\n</function>\n</tool_call>'
)
LLAMA = (
    '<|python_tag|>{"name": "read_file", "parameters": {"path": "calc.py", "start_line": 3}}; '
    '{"name": "run", "parameters": {"cmd": "ls"}}'
)
INHABIT = (
    'Reading.<tool name="read_file"><path>calc.py</path><start_line>3</start_line></tool>'
    '<tool name="run"><cmd>ls</cmd></tool>'
)
CASES = {"hermes": HERMES, "qwen3_coder": CODER, "llama3_json": LLAMA, "inhabit": INHABIT}


def _calls(parsed):
    return [(c.name, json.loads(c.arguments)) for c in parsed.calls]


@pytest.mark.parametrize("name", list(CASES))
def test_parallel_calls_with_typed_arguments(name):
    parsed = make_parser(name, SCHEMAS).parse(CASES[name])
    calls = _calls(parsed)
    assert calls[0] == ("read_file", {"path": "calc.py", "start_line": 3})
    assert calls[1][0] == "run" and len(calls) == 2
    assert "tool" not in parsed.content and "name" not in parsed.content


def test_hermes_argument_holding_the_closing_tag():
    calls = _calls(make_parser("hermes").parse(HERMES))
    assert calls[1] == ("run", {"cmd": "echo '</tool_call>'"})


def test_qwen3_coder_values_typed_by_schema():
    calls = _calls(make_parser("qwen3_coder", SCHEMAS).parse(CODER))
    assert calls[1] == ("run", {"cmd": "ls", "flags": {"all": True}})


@pytest.mark.parametrize(
    "name,text",
    [
        ("hermes", 'Sure <tool_call>\n{"name": "read_file", "arguments": {"path": \n</tool_call>'),
        ("hermes", "<tool_call>\nnot json\n</tool_call> and more"),
        ("hermes", '<tool_call>{"arguments": {}}</tool_call>'),  # no name
        ("hermes", '<tool_call>{"name": "x", "arguments": {}}'),  # never closed
        ("qwen3_coder", "<tool_call>\n<function=read_file>\n<parameter=path>\nx"),
        ("llama3_json", '{"name": "read_file", "parameters": {"path": "x"}} and then prose'),
        ("llama3_json", "Just an answer."),
        ("inhabit", '<tool name="read_file"><path>x</path>'),
    ],
)
def test_unparsable_text_stays_content(name, text):
    parsed = make_parser(name, SCHEMAS).parse(text)
    assert parsed.calls == [] and parsed.content == text


def test_malformed_call_beside_a_good_one():
    text = '<tool_call>oops</tool_call><tool_call>{"name": "run", "arguments": {"cmd": "ls"}}</tool_call>'
    parsed = make_parser("hermes").parse(text)
    assert _calls(parsed) == [("run", {"cmd": "ls"})] and parsed.content == "<tool_call>oops</tool_call>"


@pytest.mark.parametrize("name", list(CASES))
def test_streaming_split_anywhere_gives_the_same_result(name):
    text = CASES[name]
    whole = make_parser(name, SCHEMAS).parse(text)
    for step in (1, 2, 7):
        stream = StreamingToolText(make_parser(name, SCHEMAS))
        content, calls = "", []
        for end in range(step, len(text) + step, step):
            c, new = stream.feed(text[:end]) if end < len(text) else stream.finish(text)
            content += c
            calls += new
        assert content.rstrip() == whole.content.rstrip()
        assert [(c.name, c.arguments) for c in calls] == [(c.name, c.arguments) for c in whole.calls]


def test_streaming_sends_content_before_the_call_and_each_call_once_closed():
    stream = StreamingToolText(make_parser("hermes"))
    first_end = HERMES.index("</tool_call>") + len("</tool_call>")
    content, calls = stream.feed(HERMES[: HERMES.index("<tool_call>") + 5])  # "<tool" held back
    # The "\n" before the call is held (the whole answer strips it), so the stream never sends it.
    assert content == "I'll look at both." and calls == []
    _, calls = stream.feed(HERMES[:first_end])
    assert [c.name for c in calls] == ["read_file"]
    _, calls = stream.finish(HERMES)
    assert [c.name for c in calls] == ["run"]


def test_max_calls_keeps_the_first():
    stream = StreamingToolText(make_parser("hermes"), max_calls=1)
    _, calls = stream.finish(HERMES)
    assert [c.name for c in calls] == ["read_file"]


def test_detect_parser_from_templates():
    from inhabit.models.tokenizer import CHAT_TEMPLATE

    assert detect_parser(CHAT_TEMPLATE) == "inhabit"
    assert detect_parser("{{ '<tool_call>\\n' }}{{ tool_call | tojson }}") == "hermes"
    assert detect_parser("<tool_call>\\n<function={{ name }}>") == "qwen3_coder"
    assert detect_parser("{{ '<|python_tag|>' }}") == "llama3_json"
    assert detect_parser("{{ messages }}") is None and detect_parser(None) is None
    with pytest.raises(ValueError, match="unknown tool-call parser"):
        make_parser("mistral")
