"""langchain-openai's tool loop against `inhabit serve`'s chat completions, offline.

Needs the `clients` extra (`pip install -e .[clients]`: langchain-openai); skipped without it. The
model is test_server_tools.py's, trained to answer "Fix calc.py" with two parallel calls. The tools
are bound with `bind_tools` (their OpenAI schemas), so the server must return both calls as
langchain `tool_calls` (parsed arguments, ids), non-streaming and streamed (tool-call chunks that
langchain merges); the loop then runs the tools and sends their results back as `ToolMessage`s,
which the server must accept as `tool` messages answering those ids. The tiny model's second answer
is noise: the test checks only that the request was served and what it carried.
"""

from __future__ import annotations

import json

import httpx
import pytest
from test_server_tools import MESSAGES, MODEL, TOOLS, folder, server  # noqa: F401

pytest.importorskip("langchain_openai")


@pytest.mark.parametrize("stream", [False, True])
def test_langchain_tool_loop_gets_both_calls_and_sends_results_back(server, stream):  # noqa: F811
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    bodies: list[dict] = []
    statuses: list[int] = []
    http = httpx.Client(
        event_hooks={
            "request": [lambda r: bodies.append(json.loads(r.content))],
            "response": [lambda r: statuses.append(r.status_code)],
        }
    )
    llm = ChatOpenAI(
        model=MODEL, base_url=server.url + "/v1", api_key="k", temperature=0, max_tokens=80,
        max_retries=0, http_client=http, streaming=stream,
    ).bind_tools(TOOLS)  # fmt: skip
    messages = [SystemMessage(MESSAGES[0]["content"]), HumanMessage(MESSAGES[1]["content"])]
    try:
        if stream:
            reply = None
            for chunk in llm.stream(messages):
                reply = chunk if reply is None else reply + chunk
        else:
            reply = llm.invoke(messages)
        assert isinstance(reply, AIMessage)  # AIMessageChunk when streamed
        calls = [(c["name"], c["args"]) for c in reply.tool_calls]
        assert calls == [("read_file", {"path": "calc.py"}), ("run", {"cmd": "pytest -q"})]
        ids = [c["id"] for c in reply.tool_calls]
        assert len(set(ids)) == 2 and all(ids)
        outputs = {"read_file": "def add(a, b): return a - b", "run": "1 failed"}
        results = [ToolMessage(outputs[c["name"]], tool_call_id=c["id"]) for c in reply.tool_calls]
        llm.invoke([*messages, reply, *results])  # the second turn: served, its text is noise
    finally:
        http.close()
    assert statuses == [200, 200]
    assert bodies[0]["tools"] == TOOLS and bodies[0].get("stream", False) is stream
    second = bodies[1]["messages"]
    sent_calls = next(m for m in second if m["role"] == "assistant")["tool_calls"]
    assert [c["id"] for c in sent_calls] == ids
    assert [(m["tool_call_id"], m["content"]) for m in second if m["role"] == "tool"] == [
        (ids[0], outputs["read_file"]),
        (ids[1], outputs["run"]),
    ]
