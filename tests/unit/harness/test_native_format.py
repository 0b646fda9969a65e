"""The harness in the model's own tool format (`harness.tool_format = "native"`), end to end.

Model folders are written here: the project tokenizer with `<|im_start|>`/`<|im_end|>` added and a
chat template in the style of Qwen3's (a `<tools>` block, `<tool_call>` JSON, `<tool_response>`
turns, earlier turns' `<think>` dropped once a later user message exists), or one in the style of
Llama 3's JSON tool calls. Episodes run against a real process sandbox over a tiny repository.
Where a test is about the loop, the turns come from an actions file (`ReplayPolicy`) or from an
engine that answers scripted texts (the prompts are still rendered by `LocalPolicy` through the
real template); one test fine-tunes the dense-1m model briefly to make a real `read_file` call.
`OpenAIPolicy` runs episodes against the real `inhabit serve` app on loopback (a random model, and
the fine-tuned one), and SFT samples of a native transcript are checked against rollout prompts.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
from collections.abc import Sequence

import pytest
import torch

from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.harness.config import HarnessConfig
from inhabit.harness.loop import ToolFormatError, resolve_tool_format, run_episode
from inhabit.harness.prompts import NATIVE_SYSTEM, system_prompt, task_prompt, tool_schemas
from inhabit.harness.replay import ReplayPolicy
from inhabit.harness.tools import TOOLS
from inhabit.inference.engine import Completion, GenerationRequest, InferenceEngine
from inhabit.inference.local_policy import LocalPolicy
from inhabit.trainer.samples import count_split_turns, segment_samples
from inhabit.types import Trajectory

QWEN3_STYLE = (
    "{%- if tools %}{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\\n</tool_call><|im_end|>\\n\' }}'
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- set ns = namespace(last_query=-1) %}"
    "{%- for message in messages %}{%- if message.role == 'user' %}{%- set ns.last_query = loop.index0 %}"
    "{%- endif %}{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.role == 'assistant' %}{%- set content = message.content %}"
    "{%- if loop.index0 < ns.last_query and '</think>' in content %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') %}{%- endif %}"
    "{{- '<|im_start|>assistant\\n' + content }}"
    "{%- for tool_call in message.tool_calls or [] %}"
    "{%- if loop.first and content or not loop.first %}{{- '\\n' }}{%- endif %}"
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

LLAMA3_STYLE = (
    "{%- for message in messages %}"
    "{%- if message.role == 'system' %}{{- '<|im_start|>system\\n' + message.content }}"
    '{%- if tools %}{{- \'\\nCall a function by answering with JSON {"name": NAME, "parameters": {...}}:\' }}'
    "{%- for t in tools %}{{- '\\n' + (t | tojson) }}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}"
    "{%- elif message.role == 'tool' %}{{- '<|im_start|>ipython\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- elif message.tool_calls %}{{- '<|im_start|>assistant\\n' }}"
    "{%- for c in message.tool_calls %}"
    "{{- '{\"name\": \"' + c.function.name + '\", \"parameters\": ' + (c.function.arguments | tojson) + '}' }}"
    "{%- endfor %}{{- '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _template_tokenizer(base, template: str):
    tok = copy.deepcopy(base)
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.eos_token = "<|im_end|>"
    tok.chat_template = template
    return tok


@pytest.fixture(scope="module")
def base_tokenizer():
    from inhabit.models.tokenizer import default_tokenizer

    return default_tokenizer()


@pytest.fixture(scope="module")
def qwen_tok(base_tokenizer):
    return _template_tokenizer(base_tokenizer, QWEN3_STYLE)


class ScriptedEngine(InferenceEngine):
    """Answers each request with the next scripted text, as token ids of the real tokenizer."""

    def __init__(self, tokenizer, texts: Sequence[str]) -> None:
        self.tokenizer, self.texts = tokenizer, list(texts)
        self.prompts: list[list[int]] = []

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        (req,) = requests
        self.prompts.append(list(req.prompt_token_ids))
        text = self.texts.pop(0)
        ids = self.tokenizer(text + self.tokenizer.eos_token, add_special_tokens=False)["input_ids"]
        n = len(ids)
        return [Completion("", ids, [-0.5] * n, [0] * n, "stop", text=text)]

    async def load_weights(self, weights, version: int) -> None:
        raise NotImplementedError

    @property
    def version(self) -> int:
        return 0


def _call(name: str, **args) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(args)}}}\n</tool_call>'


# ------------------------------------------------------------------------------ prompts and choice
def test_tool_schemas_come_from_the_tool_specs():
    schemas = {t["function"]["name"]: t["function"] for t in tool_schemas()}
    assert list(schemas) == list(TOOLS)
    xml = system_prompt()
    for name, tool in TOOLS.items():
        params = schemas[name]["parameters"]
        assert schemas[name]["description"] == tool.spec.description and tool.spec.description in xml
        assert params["required"] == [a.name for a in tool.spec.args if a.required]
        for a in tool.spec.args:
            assert params["properties"][a.name] == {
                "type": "integer" if a.kind == "int" else "string",
                "description": a.description,
            }
    # The native prompt keeps the product's rules but not the XML format section.
    assert "<tool name=" not in NATIVE_SYSTEM and "CDATA" not in NATIVE_SYSTEM
    assert "call finish with a short message" in NATIVE_SYSTEM and "call finish with a short message" in xml


def test_auto_follows_the_chat_template(base_tokenizer, qwen_tok):
    def policy(tok):
        return LocalPolicy(ScriptedEngine(tok, []), tok, context_window=100_000)

    project = policy(base_tokenizer)  # the project's template renders no tools: xml, as today
    assert project.tool_parser is None and resolve_tool_format("auto", project) == "xml"
    with pytest.raises(ToolFormatError, match='tool_format = "xml"'):
        resolve_tool_format("native", project)
    qwen = policy(qwen_tok)
    assert qwen.tool_parser == "hermes" and resolve_tool_format("auto", qwen) == "native"
    assert resolve_tool_format("xml", qwen) == "xml"
    llama = policy(_template_tokenizer(base_tokenizer, LLAMA3_STYLE))
    assert llama.tool_parser == "llama3_json" and resolve_tool_format("auto", llama) == "native"
    replay = ReplayPolicy([])
    assert resolve_tool_format("auto", replay) == "xml" and resolve_tool_format("native", replay) == "native"


# ------------------------------------------------------------------------------ the loop, natively
ACTIONS = [
    [("read_file", {"path": "calc.py", "start_line": 1}), ("grep", {"pattern": "def sub"})],
    [
        (
            "edit_file",
            {"path": "calc.py", "old": "return a - b\n\n\ndef sub", "new": "return a + b\n\n\ndef sub"},
        )
    ],
]


@pytest.mark.parametrize("fmt", ["xml", "native"])
async def test_replay_runs_the_same_in_both_formats(sandbox, fmt):
    traj = await run_episode(
        ReplayPolicy(ACTIONS), sandbox, "fix add", config=HarnessConfig(tool_format=fmt), task_id="t"
    )
    assert traj.status == "finished" and traj.tool_format == fmt
    assert [(c.tool, c.error) for c in traj.tool_calls] == [
        ("read_file", False),
        ("grep", False),
        ("edit_file", False),
        ("finish", False),
    ]
    assert "return a - b" in traj.tool_calls[0].observation and "def sub" in traj.tool_calls[1].observation
    assert "return a + b" in (await sandbox.read_file("calc.py")).decode()
    messages = traj.segments[0].messages
    if fmt == "xml":
        assert [m.role for m in messages] == [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "user",
            "assistant",
        ]
        return
    assert messages[0].content == NATIVE_SYSTEM
    assert [m.role for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    first = messages[2].tool_calls
    assert [c["function"]["name"] for c in first] == ["read_file", "grep"]  # parallel calls stay parallel
    assert [m.tool_call_id for m in messages[3:5]] == [
        c["id"] for c in first
    ]  # one observation per call, in order
    assert [m.name for m in messages[3:5]] == ["read_file", "grep"]
    assert messages[3].content == traj.tool_calls[0].observation
    assert Trajectory.from_json(traj.to_json()) == traj


class _Malformed(Policy):
    """Answers with calls a model might botch, then finishes (native format only)."""

    def __init__(self) -> None:
        self.turns = [
            [
                ("c1", "read_file", '{"path": "calc.py"'),
                ("c2", "teleport", "{}"),
                ("c3", "read_file", '["x"]'),
            ],
            [],
            [("c4", "finish", '{"message": "done"}')],
        ]

    def native_tools(self) -> bool:
        return True

    async def next_turn(self, messages, *, max_tokens, stop=(), tools=None) -> PolicyTurn:
        assert tools is not None
        calls = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in self.turns.pop(0)
        ]
        return PolicyTurn(text="...", tool_calls=calls, content="")

    def count_tokens(self, messages, tools=None) -> int:
        return sum(len(m.content) for m in messages) // 4


async def test_malformed_native_calls_become_observations(sandbox):
    traj = await run_episode(_Malformed(), sandbox, "x", config=HarnessConfig(tool_format="auto"))
    assert traj.status == "finished" and traj.tool_format == "native"
    bad = traj.tool_calls[:3]
    assert all(c.error for c in bad)
    assert "not valid JSON" in bad[0].observation and "one JSON object" in bad[0].observation
    assert "unknown tool 'teleport'" in bad[1].observation and "read_file" in bad[1].observation
    assert "not a JSON object" in bad[2].observation
    messages = traj.segments[0].messages
    tool_msgs = [m for m in messages if m.role == "tool"]
    assert [m.tool_call_id for m in tool_msgs] == ["c1", "c2", "c3"]
    assert all(m.content.startswith("Error: ") for m in tool_msgs)
    nudge = messages[messages.index(tool_msgs[-1]) + 2]  # the turn without a call gets a user nudge
    assert nudge.role == "user" and "no tool call" in nudge.content


# ------------------------------------------------------------------------------ token-exact turns
async def test_template_history_rewrite_splits_the_sample(sandbox, qwen_tok):
    texts = [
        "<think>plan first</think>\n\nLet me look.",  # no call: a user nudge follows, so the template drops this think
        _call("read_file", path="calc.py"),
        _call("finish", message="read it"),
    ]
    engine = ScriptedEngine(qwen_tok, texts)
    policy = LocalPolicy(engine, qwen_tok, context_window=100_000)
    traj = await run_episode(policy, sandbox, "look at calc", config=HarnessConfig(tool_format="auto"))
    assert traj.status == "finished" and traj.tool_format == "native"
    assert [c.tool for c in traj.tool_calls] == ["read_file", "finish"]
    decoded = [qwen_tok.decode(p) for p in engine.prompts]
    assert "<tools>\n" + json.dumps(tool_schemas()[0]) in decoded[0]
    assert "plan first" not in decoded[1] and "Let me look." in decoded[1]  # history rewritten
    assert "<tool_response>\n" + traj.tool_calls[0].observation + "\n</tool_response>" in decoded[2]
    turns = traj.segments[0].turns
    for turn in turns:  # the completion ids are exactly what the engine generated
        assert (
            turn.completion_token_ids
            == qwen_tok(turn.text + "<|im_end|>", add_special_tokens=False)["input_ids"]
        )
    samples = segment_samples(traj.segments[0], advantage=1.0)
    assert [s.meta["turns"] for s in samples] == [1, 2] and count_split_turns(samples) == 1
    assert samples[1].input_ids.tolist() == turns[2].prompt_token_ids + turns[2].completion_token_ids


async def test_llama3_json_calls(sandbox, base_tokenizer):
    tok = _template_tokenizer(base_tokenizer, LLAMA3_STYLE)
    texts = [
        '{"name": "list_dir", "parameters": {"path": "."}}',
        '{"name": "finish", "parameters": {"message": "ok"}}',
    ]
    engine = ScriptedEngine(tok, texts)
    traj = await run_episode(LocalPolicy(engine, tok, context_window=100_000), sandbox, "look")
    assert traj.tool_format == "native" and [c.tool for c in traj.tool_calls] == ["list_dir", "finish"]
    assert "calc.py" in traj.tool_calls[0].observation
    assert "<|im_start|>ipython\n" + traj.tool_calls[0].observation in tok.decode(engine.prompts[1])
    samples = segment_samples(traj.segments[0], advantage=1.0)
    assert count_split_turns(samples) == 0 and [s.meta["turns"] for s in samples] == [2]


# ------------------------------------------------------------------------------ a real tiny model
READ = _call("read_file", path="calc.py") + "<|im_end|>"


@pytest.fixture(scope="module")
def tool_folder(tmp_path_factory, qwen_tok):
    """dense-1m trained (Adam, loss on the completion only) until greedy decoding of the harness's
    native first prompt writes a read_file call."""
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    policy = LocalPolicy(ScriptedEngine(qwen_tok, []), qwen_tok, context_window=100_000)
    messages = [Message("system", NATIVE_SYSTEM), Message("user", task_prompt("Fix add in calc.py."))]
    prompt = policy.render(messages, tool_schemas())
    target = qwen_tok(READ, add_special_tokens=False)["input_ids"]
    model = build_tiny_model("dense-1m", vocab_size=len(qwen_tok), seed=0)
    ids = torch.tensor([prompt + target])
    labels = ids.clone()
    labels[0, : len(prompt)] = -100
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    model.train()
    for _ in range(300):
        out = model(input_ids=ids, labels=labels)
        if torch.equal(out.logits[0, len(prompt) - 1 : -1].argmax(-1), torch.tensor(target)):
            break
        opt.zero_grad()
        out.loss.backward()
        opt.step()
    model.eval()
    return save_model_folder(model, qwen_tok, tmp_path_factory.mktemp("models") / "tiny-native")


@pytest.mark.slow  # about a minute of CPU training on a ~3k-token prompt (the ten tools' schemas)
async def test_finetuned_tiny_model_reads_a_file_natively(sandbox, tool_folder):
    from inhabit.inference.config import EngineConfig

    policy = LocalPolicy.from_path(tool_folder, engine_config=EngineConfig(seed=0), temperature=0.0)
    try:
        cfg = HarnessConfig(max_turns=1, max_turn_tokens=64)
        traj = await run_episode(policy, sandbox, "Fix add in calc.py.", config=cfg)
    finally:
        await policy.close()
    assert traj.tool_format == "native" and traj.status == "turn_limit"
    (call,) = traj.tool_calls
    assert call.tool == "read_file" and call.args == {"path": "calc.py"} and not call.error
    assert "return a - b" in call.observation
    (turn,) = traj.segments[0].turns
    assert turn.completion_token_ids and len(turn.logprobs) == len(turn.completion_token_ids)
    assert [m.role for m in traj.segments[0].messages][-2:] == ["assistant", "tool"]


# ------------------------------------------------------------------------------ OpenAIPolicy against inhabit serve
@contextlib.contextmanager
def _serving(folder):
    """The model folder behind the real `inhabit serve` app on loopback (its parser detected from
    the template)."""
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app

    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    try:
        with BackgroundServer(create_app(engine, engine.tokenizer, model_name="tiny")) as srv:
            yield srv.url + "/v1"
    finally:
        asyncio.run(engine.close())


@pytest.fixture(scope="module")
def random_served(tmp_path_factory, qwen_tok):
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    model = build_tiny_model("dense-1m", vocab_size=len(qwen_tok), seed=0)
    with _serving(save_model_folder(model, qwen_tok, tmp_path_factory.mktemp("models") / "random")) as url:
        yield url


@pytest.fixture(scope="module")
def tool_served(tool_folder):
    with _serving(tool_folder) as url:
        yield url


async def _remote_episode(url, sandbox, max_turns: int):
    from inhabit.inference.openai_policy import OpenAIPolicy

    policy = OpenAIPolicy(url, "tiny", temperature=0.0, timeout_s=60, max_retries=0)
    try:
        cfg = HarnessConfig(tool_format="native", max_turns=max_turns, max_turn_tokens=64)
        return await run_episode(policy, sandbox, "Fix add in calc.py.", config=cfg)
    finally:
        await policy.close()


async def test_openai_policy_sends_tools_to_inhabit_serve(sandbox, qwen_tok, random_served):
    """A random model writes no call: the nudge goes back as a user message; every request carried
    the tools, and the server rendered exactly what LocalPolicy would."""
    from inhabit.inference.chat_tools import encode_native

    traj = await _remote_episode(random_served, sandbox, max_turns=2)
    assert traj.tool_format == "native" and traj.status == "turn_limit" and traj.tool_calls == []
    messages = traj.segments[0].messages
    assert [m.role for m in messages] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert messages[0].content == NATIVE_SYSTEM and "no tool call" in messages[3].content
    assert [m.content for m in messages[2:5:2]] == [t.text for t in traj.segments[0].turns]
    turns = traj.segments[0].turns
    for turn, upto in zip(turns, (2, 4), strict=True):
        assert turn.prompt_token_ids == encode_native(qwen_tok, messages[:upto], tool_schemas())
        text = qwen_tok.decode(turn.prompt_token_ids)
        assert "<tools>\n" + "\n".join(json.dumps(t) for t in tool_schemas()) + "\n</tools>" in text


@pytest.mark.slow  # the tool_folder fixture trains for about a minute
async def test_openai_policy_round_trips_tool_messages_through_inhabit_serve(sandbox, qwen_tok, tool_served):
    """The served model calls read_file; the next request carries the assistant `tool_calls` and the
    `tool` message, which the server renders as the template's `<tool_call>` and `<tool_response>`."""
    from inhabit.inference.chat_tools import encode_native

    traj = await _remote_episode(tool_served, sandbox, max_turns=2)
    assert traj.tool_format == "native"
    call = traj.tool_calls[0]
    assert call.tool == "read_file" and call.args == {"path": "calc.py"} and not call.error
    messages = traj.segments[0].messages
    assert [m.role for m in messages[:4]] == ["system", "user", "assistant", "tool"]
    (wire,) = messages[2].tool_calls
    assert messages[3].tool_call_id == wire["id"] and messages[3].content == call.observation
    second = traj.segments[0].turns[1].prompt_token_ids
    assert second == encode_native(qwen_tok, messages[:4], tool_schemas())
    text = qwen_tok.decode(second)
    assert READ + "\n<|im_start|>user\n<tool_response>\n" + call.observation + "\n</tool_response>" in text


# ------------------------------------------------------------------------------ SFT from native transcripts
async def test_sft_sample_of_a_native_transcript_is_what_rollouts_render(sandbox, qwen_tok, base_tokenizer):
    from inhabit.inference.chat_tools import encode_native
    from inhabit.models.tokenizer import encode_chat
    from inhabit.trainer.samples import sft_samples

    traj = await run_episode(
        ReplayPolicy(ACTIONS), sandbox, "fix add", config=HarnessConfig(tool_format="native"), task_id="t"
    )
    messages = traj.segments[0].messages
    (sample,) = sft_samples(traj, qwen_tok)
    ids, mask = sample.input_ids.tolist(), sample.loss_mask.tolist()
    starts = [k for k in range(len(mask)) if mask[k] and (k == 0 or not mask[k - 1])]
    ends = [k for k in range(len(mask)) if mask[k] and (k + 1 == len(mask) or not mask[k + 1])]
    assistants = [i for i, m in enumerate(messages) if m.role == "assistant"]
    assert len(starts) == len(assistants) == 3
    tools = tool_schemas()
    for i, start, end in zip(assistants, starts, ends, strict=True):
        # each loss span follows exactly the prompt LocalPolicy renders for that turn at rollout time
        assert ids[:start] == encode_native(qwen_tok, messages[:i], tools)
        calls = [
            (c["function"]["name"], json.loads(c["function"]["arguments"])) for c in messages[i].tool_calls
        ]
        written = "\n".join(_call(name, **args) for name, args in calls)
        assert qwen_tok.decode(ids[start : end + 1]) == written + "<|im_end|>\n"
    text = qwen_tok.decode(ids)
    assert "<tools>\n" + json.dumps(tools[0]) in text
    obs = [c.observation for c in traj.tool_calls[:2]]  # the parallel calls' results share one user turn
    assert f"<|im_start|>user\n<tool_response>\n{obs[0]}\n</tool_response>\n<tool_response>\n{obs[1]}" in text
    # the project's template renders no tools: a native chat is refused with what to do
    with pytest.raises(ValueError, match="xml tool format"):
        encode_chat(base_tokenizer, messages, add_generation_prompt=False)
