"""The OpenAI Agents SDK's tool loop against `inhabit serve`'s `/v1/responses`, offline.

Needs the `clients` extra (`pip install -e .[clients]`: openai-agents); skipped without it. The
model is test_server_tools.py's, trained to answer "Fix calc.py" with two parallel calls; the
agent's function tools carry the same schemas, so the SDK must get those calls back through the
Responses API, run both tools, and send their outputs back as `function_call_output` items. The
tiny model's answer to that second turn is noise up to `max_output_tokens`, which the SDK treats
as an incomplete response (as it would from OpenAI): the test stops there.
"""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from test_server_tools import MODEL, TOOLS, folder, server  # noqa: F401

agents = pytest.importorskip("agents")


def _tool(spec: dict, ran: list) -> agents.FunctionTool:
    fn = spec["function"]
    outputs = {"read_file": "def add(a, b): return a - b", "run": "1 failed"}

    async def invoke(_ctx, args: str) -> str:
        ran.append((fn["name"], json.loads(args)))
        return outputs[fn["name"]]

    return agents.FunctionTool(
        name=fn["name"],
        description=fn["description"],
        params_json_schema=fn["parameters"],
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )


@pytest.mark.parametrize("stream", [False, True])
def test_agent_runs_both_tools_and_sends_their_outputs_back(server, stream):  # noqa: F811
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)  # offline: no trace export
    ran: list = []
    bodies: list[dict] = []
    statuses: list[int] = []

    async def seen_request(request: httpx.Request) -> None:
        bodies.append(json.loads(request.content))

    async def seen_response(response: httpx.Response) -> None:
        statuses.append(response.status_code)

    async def run() -> None:
        http = httpx.AsyncClient(event_hooks={"request": [seen_request], "response": [seen_response]})
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, http_client=http)
        agent = agents.Agent(
            name="fixer",
            instructions="You fix bugs.",
            tools=[_tool(t, ran) for t in TOOLS],
            model=agents.OpenAIResponsesModel(model=MODEL, openai_client=client),
            model_settings=agents.ModelSettings(temperature=0, max_tokens=80),
        )
        try:
            if stream:
                result = agents.Runner.run_streamed(agent, "Fix calc.py", max_turns=2)
                async for _ in result.stream_events():
                    pass
            else:
                await agents.Runner.run(agent, "Fix calc.py", max_turns=2)
        except agents.exceptions.ModelBehaviorError as e:  # the second turn's noise: see above
            assert "incomplete" in str(e)
        finally:
            await http.aclose()

    asyncio.run(run())
    assert ran == [("read_file", {"path": "calc.py"}), ("run", {"cmd": "pytest -q"})]
    assert statuses == [200, 200] and all(b.get("stream", False) is stream for b in bodies)
    second = bodies[1]["input"]
    calls = {i["call_id"]: i["name"] for i in second if i.get("type") == "function_call"}
    outputs = {i["call_id"]: i["output"] for i in second if i.get("type") == "function_call_output"}
    assert sorted(calls.values()) == ["read_file", "run"] and set(outputs) == set(calls)
