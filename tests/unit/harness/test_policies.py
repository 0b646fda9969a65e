"""ReplayPolicy (actions files) and OpenAIPolicy (against a loopback server the test starts)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse

from inhabit.contracts import Message
from inhabit.errors import InferenceError, PolicyUnreachable
from inhabit.harness.parse import ToolCall, parse_tool_calls
from inhabit.harness.replay import ActionsFileError, ReplayPolicy
from inhabit.harness.tools import TOOLS, bind_args
from inhabit.inference.openai_policy import OpenAIPolicy
from inhabit.serving import BackgroundServer


async def test_replay_renders_turns_through_the_real_parser_then_finishes(tmp_path: Path) -> None:
    content = "if a < b && '</content>' != ']]>':\n    pass\n"
    path = tmp_path / "a.json"
    path.write_text(
        json.dumps(
            [
                [
                    {"tool": "write_file", "args": {"path": "x.py", "content": content}},
                    {"tool": "read_file", "args": {"path": "x.py", "start_line": 2}},
                ],
                [{"tool": "run", "args": {"command": "ls", "timeout_s": 5}}],
            ]
        )
    )
    policy = ReplayPolicy.from_file(path)
    msgs = [Message("user", "task")]
    first = parse_tool_calls((await policy.next_turn(msgs, max_tokens=100)).text)
    assert all(isinstance(c, ToolCall) for c in first)
    assert bind_args(TOOLS["write_file"].spec, first[0].args)["content"] == content  # type: ignore[union-attr]
    assert bind_args(TOOLS["read_file"].spec, first[1].args)["start_line"] == 2  # type: ignore[union-attr]
    await policy.next_turn(msgs, max_tokens=100)
    (last,) = parse_tool_calls((await policy.next_turn(msgs, max_tokens=100)).text)
    assert isinstance(last, ToolCall) and last.name == "finish"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tool": "x"}, "expected a JSON list of turns"),
        ([{"tool": "x"}], "turn 0 must be a list"),
        ([[{"args": {}}]], 'expected {"tool"'),
        ([[{"tool": "x", "args": [], "extra": 1}]], 'only "tool" and an "args" object'),
    ],
)
def test_bad_actions_files_are_typed_errors(tmp_path: Path, data: object, message: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ActionsFileError, match=message):
        ReplayPolicy.from_file(path)
    path.write_text("[[")
    with pytest.raises(ActionsFileError, match="not valid JSON"):
        ReplayPolicy.from_file(path)


@pytest.fixture
def endpoint() -> Iterator[tuple[dict, str]]:
    state: dict = {"fail": 0, "status": 503, "seen": []}
    app = FastAPI()

    @app.post("/v1/chat/completions")
    def chat(body: dict) -> JSONResponse:
        state["seen"].append(body)
        if state["fail"] > 0:
            state["fail"] -= 1
            return JSONResponse({"error": {"message": "nope"}}, status_code=state["status"])
        return JSONResponse(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "prompt_token_ids": [1, 2, 3],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "hi there"},
                        "finish_reason": "length",
                        "token_ids": [7, 8],
                        "versions": [3, 3],
                        "logprobs": {
                            "content": [
                                {"token": "hi", "logprob": -0.5, "bytes": None, "top_logprobs": []},
                                {"token": " there", "logprob": -1.25, "bytes": None, "top_logprobs": []},
                            ]
                        },
                    }
                ],
                "usage": {"prompt_tokens": 100, "completion_tokens": 2, "total_tokens": 102},
            }
        )

    with BackgroundServer(app) as server:
        yield state, f"{server.url}/v1"


async def test_openai_policy_retries_and_captures_token_facts(endpoint) -> None:
    state, url = endpoint
    state["fail"] = 2
    policy = OpenAIPolicy(url, "m", backoff_s=0.01, logprobs=True)
    msgs = [Message("system", "s" * 200), Message("user", "u" * 200)]
    turn = await policy.next_turn(msgs, max_tokens=5)
    await policy.close()
    assert len(state["seen"]) == 3 and state["seen"][-1]["logprobs"] is True
    assert turn.text == "hi there" and turn.finish_reason == "length"
    assert turn.logprobs == [-0.5, -1.25] and turn.completion_token_ids == [7, 8] and turn.versions == [3, 3]
    assert turn.prompt_token_ids == [1, 2, 3] and turn.prompt_tokens == 100
    assert policy.count_tokens(msgs) == 400 // 4 + 8  # calibrated: 400 chars were 100 tokens


async def test_openai_policy_gives_up_at_once_on_client_errors(endpoint) -> None:
    state, url = endpoint
    state["fail"], state["status"] = 5, 400
    policy = OpenAIPolicy(url, "m", backoff_s=0.01)
    with pytest.raises(InferenceError, match="BadRequestError"):
        await policy.next_turn([Message("user", "x")], max_tokens=5)
    await policy.close()
    assert len(state["seen"]) == 1


@pytest.mark.parametrize(("status", "message"), [(401, "refused the API key"), (403, "refused the API key"),
                                                 (404, "answered 404")])  # fmt: skip
async def test_openai_policy_an_endpoint_that_cannot_serve_us_is_unreachable(
    endpoint, status, message
) -> None:
    state, url = endpoint
    state["fail"], state["status"] = 5, status
    policy = OpenAIPolicy(url, "m", backoff_s=0.01)
    with pytest.raises(PolicyUnreachable, match=message):
        await policy.next_turn([Message("user", "x")], max_tokens=5)
    await policy.close()
    assert len(state["seen"]) == 1  # no retries: the same answer would come back


async def test_openai_policy_nothing_listening_is_unreachable_at_once() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    policy = OpenAIPolicy(f"http://127.0.0.1:{port}/v1", "m", backoff_s=10.0)  # a retry would hang the test
    with pytest.raises(PolicyUnreachable, match="cannot connect to"):
        await asyncio.wait_for(policy.next_turn([Message("user", "x")], max_tokens=5), 30)
    await policy.close()
