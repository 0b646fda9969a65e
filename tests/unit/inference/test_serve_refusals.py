"""`inhabit serve` refuses in one line what it cannot serve, instead of failing every request later.

A folder without a chat template, a `--tool-call-parser` that contradicts the template, and
`tools` sent to a model whose template renders none (400, unless `--xml-tools` lets the server
describe them in inhabit's XML call format). Real tiny model folders, the real CLI and server.
"""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from test_server_tools import QWEN3_STYLE

SRC = Path(__file__).resolve().parents[3] / "src"
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


def _folder(tmp_path_factory, tokenizer, name: str, template: str | None):
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    tok = copy.deepcopy(tokenizer)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = template
    model = build_tiny_model("dense-1m", vocab_size=len(tok), seed=0)
    return save_model_folder(model, tok, tmp_path_factory.mktemp("models") / name)


@pytest.fixture(scope="module")
def bare_folder(tmp_path_factory, tokenizer):
    return _folder(tmp_path_factory, tokenizer, "bare", None)


@pytest.fixture(scope="module")
def qwen_folder(tmp_path_factory, tokenizer):
    return _folder(tmp_path_factory, tokenizer, "qwen", QWEN3_STYLE)


def _serve(folder, *args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "inhabit", "serve", "--model", str(folder), "--port", "0", *args]
    env = os.environ | {"PYTHONPATH": str(SRC)}
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)


def test_folder_without_a_chat_template_is_refused_in_one_line(bare_folder):
    result = _serve(bare_folder)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert len(lines) == 1 and "no chat template" in lines[0], result.stderr


def test_a_parser_the_template_contradicts_is_refused(qwen_folder):
    result = _serve(qwen_folder, "--tool-call-parser", "llama3_json")
    assert result.returncode == 2, result.stderr
    assert "writes hermes tool calls" in result.stderr and "--tool-call-parser hermes" in result.stderr


def test_check_servable_rules(tokenizer, qwen_folder):
    from transformers import AutoTokenizer

    from inhabit.inference.chat_tools import check_servable
    from inhabit.inference.errors import ServeRefused

    qwen = AutoTokenizer.from_pretrained(qwen_folder)
    assert check_servable(qwen, "auto") == "hermes" and check_servable(qwen, "hermes") == "hermes"
    assert check_servable(qwen, "none") is None
    assert check_servable(tokenizer, "auto") == "inhabit"
    with pytest.raises(ServeRefused, match="writes inhabit tool calls"):
        check_servable(tokenizer, "hermes")
    plain = copy.deepcopy(tokenizer)
    plain.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ServeRefused, match="does not render `tools`"):
        check_servable(plain, "hermes")


@pytest.mark.parametrize("xml_tools", [False, True])
def test_tools_to_a_template_that_renders_none(moe_folder, xml_tools):
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(moe_folder, EngineConfig(seed=0))
    app = create_app(engine, engine.tokenizer, model_name="m", xml_tools=xml_tools)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "max_tokens": 2}
    try:
        with BackgroundServer(app) as srv:
            r = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)
            plain = httpx.post(srv.url + "/v1/chat/completions", json=body | {"tools": None}, timeout=60)
    finally:
        asyncio.run(engine.close())
    assert plain.status_code == 200
    if not xml_tools:
        assert r.status_code == 400 and r.json()["error"]["param"] == "tools"
        assert "--xml-tools" in r.json()["error"]["message"]
        return
    assert r.status_code == 200, r.text
    prompt = engine.tokenizer.decode(r.json()["prompt_token_ids"])
    assert '<tool name="NAME">' in prompt and "- run: Run a shell command. arguments" in prompt


CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def test_xml_tools_under_a_real_template_that_renders_none(moe_folder):
    """A ChatML template like SmolLM2's renders no `tools`: with --xml-tools the tools are described
    in the system message and the template is rendered without them, not refused."""
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(moe_folder, EngineConfig(seed=0))
    engine.tokenizer.chat_template = CHATML
    app = create_app(engine, engine.tokenizer, model_name="m", tool_call_parser="inhabit", xml_tools=True)
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS, "max_tokens": 2}
    try:
        with BackgroundServer(app) as srv:
            r = httpx.post(srv.url + "/v1/chat/completions", json=body, timeout=60)
    finally:
        asyncio.run(engine.close())
    assert r.status_code == 200, r.text
    prompt = engine.tokenizer.decode(r.json()["prompt_token_ids"])
    assert prompt.startswith("<|im_start|>system\n") and '<tool name="NAME">' in prompt
    assert "- run: Run a shell command. arguments" in prompt


def test_eval_on_a_folder_without_a_template_is_one_line(bare_folder):
    tasks = Path(__file__).resolve().parents[3] / "examples" / "tasks" / "demo-001"
    cmd = [sys.executable, "-m", "inhabit", "eval", "--tasks", str(tasks), "--model", str(bare_folder)]
    result = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=os.environ | {"PYTHONPATH": str(SRC)}
    )
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip() and "Warning" not in line]
    assert len(lines) == 1 and "no chat template" in lines[0] and "infrastructure" not in result.stderr


@pytest.mark.parametrize("which,native", [("qwen", True), ("project", False)])
def test_an_endpoint_says_whether_it_parses_native_calls(qwen_folder, moe_folder, which, native):
    from inhabit.harness.loop import resolve_tool_format
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.openai_policy import OpenAIPolicy
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(qwen_folder if which == "qwen" else moe_folder, EngineConfig(seed=0))
    app = create_app(engine, engine.tokenizer, model_name="m")

    async def probe(url: str) -> tuple[bool | None, str, str]:
        policy = OpenAIPolicy(url + "/v1", None)
        try:
            before = resolve_tool_format("auto", policy)
            return await policy.probe_tools(), before, resolve_tool_format("auto", policy)
        finally:
            await policy.close()

    try:
        with BackgroundServer(app) as srv:
            said, before, after = asyncio.run(probe(srv.url))
    finally:
        asyncio.run(engine.close())
    assert said is native and before == "xml"
    assert after == ("native" if native else "xml")
