"""The native quickstart's pieces: the Qwen3-style template of the project's tokenizer, its one-token
system turn, and the bootstrap's native transcripts (real expert episodes in a process sandbox)."""

from __future__ import annotations

import asyncio
import json

import pytest

from inhabit.contracts import Message
from inhabit.harness.config import HarnessConfig
from inhabit.harness.prompts import NATIVE_SYSTEM, tool_schemas
from inhabit.inference.chat_tools import encode_native, template_parser
from inhabit.inference.local_policy import LocalPolicy
from inhabit.inference.tool_parsers import make_parser
from inhabit.models.tokenizer import CHAT_TEMPLATE, NATIVE_CHAT_TEMPLATE, render_chat
from inhabit.orchestrator.quickstart.bootstrap import (
    native_system_text,
    quickstart_native_tokenizer,
    quickstart_tokenizer,
    transcript_example,
)
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.taskgen.families.quickstart import generate, write_quick_task
from inhabit.taskgen.families.quickstart_expert import expert_transcripts


@pytest.fixture(scope="module")
def tok():
    return quickstart_native_tokenizer()


def call(i: int, name: str, args: dict) -> dict:
    return {"id": f"c{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def test_the_template_renders_tools_and_names_the_hermes_parser(tok):
    assert template_parser(tok) == "hermes"
    assert template_parser(quickstart_tokenizer()) is None  # the xml quickstart is unchanged
    assert quickstart_tokenizer().chat_template == CHAT_TEMPLATE
    text = render_chat(tok, [Message("system", NATIVE_SYSTEM), Message("user", "hi")], tools=tool_schemas())
    for t in tool_schemas():
        assert json.dumps(t) in text  # every schema, as JSON, inside the <tools> block
    assert text.startswith("<|bos|><|system|>" + NATIVE_SYSTEM + "\n\n# Tools")
    assert text.endswith("</tool_call><|end|><|user|>hi<|end|><|assistant|>")


def test_the_native_system_turn_is_one_token(tok):
    block = native_system_text(tok)
    ids = encode_native(tok, [Message("system", NATIVE_SYSTEM), Message("user", "Task:\nx")], tool_schemas())
    assert (
        len(tok(render_chat(tok, [Message("system", NATIVE_SYSTEM)], tools=tool_schemas()))["input_ids"]) < 8
    )
    assert tok.convert_tokens_to_ids(block) == ids[2] and tok.decode([ids[2]]) == block
    assert len(ids) < 20  # instead of ~2,100 tokens of instructions and JSON Schema


def test_a_generated_call_parses_and_renders_back_to_the_same_text(tok):
    """What the bootstrap teaches the model to write is what the template renders from the parsed
    calls: a turn copied exactly extends the next prompt token for token (no split)."""
    calls = [call(0, "read_file", {"path": "m.py"}), call(1, "finish", {"message": 'done "it"'})]
    msgs = [Message("system", NATIVE_SYSTEM), Message("user", "Task:\nx")]
    prompt = render_chat(tok, msgs, tools=tool_schemas())
    full = render_chat(
        tok, [*msgs, Message("assistant", "", tool_calls=tuple(calls))], add_generation_prompt=False,
        tools=tool_schemas(),
    )  # fmt: skip
    generated = full[len(prompt) : -len("<|end|>")]
    parsed = make_parser("hermes").parse(generated)
    assert (
        parsed.content.strip() == ""
        and [  # LocalPolicy keeps the stripped text as content(c.name, json.loads(c.arguments)) for c in parsed.calls] == [
            ("read_file", {"path": "m.py"}),
            ("finish", {"message": 'done "it"'}),
        ]
    )
    again = [c.wire() for c in parsed.calls]
    rerendered = render_chat(
        tok, [*msgs, Message("assistant", "", tool_calls=tuple(again))], add_generation_prompt=False,
        tools=tool_schemas(),
    )  # fmt: skip
    assert rerendered == full


def test_consecutive_tool_messages_share_one_user_turn(tok):
    msgs = [
        Message("user", "u"),
        Message("assistant", "", tool_calls=(call(0, "read_file", {"path": "a"}), call(1, "list_dir", {}))),
        Message("tool", "A", tool_call_id="c0", name="read_file"),
        Message("tool", "B", tool_call_id="c1", name="list_dir"),
    ]
    text = render_chat(tok, msgs, tools=tool_schemas())
    assert text.endswith(
        "<|user|><tool_response>\nA\n</tool_response>\n<tool_response>\nB\n</tool_response><|end|><|assistant|>"
    )


def test_native_bootstrap_examples_are_the_prompts_rollouts_see(tok, tmp_path):
    """The expert's episodes run through the harness in the native format; each example's ids at an
    assistant turn are exactly what `LocalPolicy` renders for that turn, and the loss covers the
    `<tool_call>` text and its closing `<|end|>` only."""
    tasks = generate(3, seed=5)
    pairs = [(t, write_quick_task(tmp_path, t)) for t in tasks]
    provider = create_provider(SandboxConfig(backend="process"))
    harness = HarnessConfig(max_turns=4, tool_format="native")
    trajs = asyncio.run(expert_transcripts(pairs, provider, harness, grade=True, careless=0.0, seed=0))
    assert len(trajs) == 3 and {t.tool_format for t in trajs} == {"native"}
    policy = LocalPolicy(engine=None, tokenizer=tok, context_window=1024)  # type: ignore[arg-type]
    for traj in trajs:
        ids, mask = transcript_example(tok, traj)
        messages = traj.segments[-1].messages
        starts = [i for i, m in enumerate(messages) if m.role == "assistant"]
        assert len(starts) == 2  # read, then edit + finish
        learned = []
        for i in starts:
            prompt = policy.render(messages[:i], tool_schemas())
            assert ids[: len(prompt)] == prompt and not any(mask[: len(prompt)][-1:])
            n = next((k for k in range(len(prompt), len(ids)) if not mask[k]), len(ids))
            learned.append(tok.decode(ids[len(prompt) : n]))
        assert learned[0].startswith('<tool_call>\n{"name": "read_file"') and learned[0].endswith("<|end|>")
        assert learned[1].count("<tool_call>") == 2 and learned[1].endswith("</tool_call><|end|>")
        assert sum(mask) == sum(len(tok(t, add_special_tokens=False)["input_ids"]) for t in learned)


def test_the_native_template_is_the_one_the_tokenizer_saves(tok, tmp_path):
    from transformers import AutoTokenizer

    from inhabit.models.tokenizer import save_tokenizer

    save_tokenizer(tok, tmp_path)
    again = AutoTokenizer.from_pretrained(str(tmp_path), local_files_only=True)
    assert again.chat_template == NATIVE_CHAT_TEMPLATE and len(again) == len(tok)
    msgs = [Message("system", NATIVE_SYSTEM), Message("user", "Task:\nx")]
    assert encode_native(again, msgs, tool_schemas()) == encode_native(tok, msgs, tool_schemas())
