"""Structured output and forced tool calls through the agent frameworks' own flows, against
`inhabit serve`, offline.

Needs the `clients` extra (`pip install -e .[clients]`: langchain-openai, openai-agents, litellm,
mini-swe-agent); each test skips without its package. The server and the random tiny model are
test_constrained.py's: only constrained decoding can make its answers parse as the `Weather` model
or call the function asked for.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json

import jsonschema
import pytest
from test_constrained import MODEL, TOOLS, Weather, folder, server  # noqa: F401

ASK = "Describe the weather."


def _needs(package: str):
    missing = importlib.util.find_spec(package) is None
    return pytest.mark.skipif(missing, reason=f"{package} is not installed (the `clients` extra)")


@_needs("langchain_openai")
@pytest.mark.parametrize("method", ["json_schema", "function_calling"])
def test_langchain_with_structured_output(server, method):  # noqa: F811
    import langchain_openai

    llm = langchain_openai.ChatOpenAI(
        model=MODEL, base_url=server.url + "/v1", api_key="k", temperature=0, max_tokens=200, max_retries=0
    )
    answer = llm.with_structured_output(Weather, method=method).invoke(ASK)
    assert isinstance(answer, Weather) and -40 <= answer.celsius <= 50


@_needs("agents")
def test_openai_agents_output_type(server):  # noqa: F811
    import agents
    from openai import AsyncOpenAI

    agents.set_tracing_disabled(True)  # offline: no trace export

    async def run() -> object:
        client = AsyncOpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0)
        agent = agents.Agent(
            name="weather",
            instructions="Answer as JSON.",
            model=agents.OpenAIChatCompletionsModel(model=MODEL, openai_client=client),
            model_settings=agents.ModelSettings(temperature=0, max_tokens=200),
            output_type=Weather,
        )
        return (await agents.Runner.run(agent, ASK, max_turns=1)).final_output

    assert isinstance(asyncio.run(run()), Weather)


@_needs("litellm")
@pytest.mark.parametrize("provider", ["openai", "hosted_vllm"])
def test_litellm_response_format_pydantic(server, provider):  # noqa: F811
    """litellm turns the pydantic model into a json_schema response_format, for its OpenAI
    provider and for its vLLM one (what users pick for a self-hosted server)."""
    import litellm

    answer = litellm.completion(
        model=f"{provider}/{MODEL}", api_base=server.url + "/v1", api_key="k",
        messages=[{"role": "user", "content": ASK}], response_format=Weather, temperature=0, max_tokens=200,
    )  # fmt: skip
    weather = Weather.model_validate_json(answer.choices[0].message.content)
    assert -40 <= weather.celsius <= 50


@_needs("litellm")
@pytest.mark.parametrize("stream", [False, True])
def test_litellm_forced_tool_choice(server, stream):  # noqa: F811
    import litellm

    answer = litellm.completion(
        model=f"openai/{MODEL}", api_base=server.url + "/v1", api_key="k",
        messages=[{"role": "user", "content": ASK}], tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "run"}}, temperature=0, max_tokens=200,
        stream=stream,
    )  # fmt: skip
    if stream:
        answer = litellm.stream_chunk_builder(list(answer))
    (call,) = answer.choices[0].message.tool_calls
    assert call.function.name == "run" and answer.choices[0].finish_reason == "tool_calls"
    jsonschema.validate(json.loads(call.function.arguments), TOOLS[1]["function"]["parameters"])


@_needs("minisweagent")
def test_mini_swe_agent_default_flow_for_two_steps(server, tmp_path, monkeypatch):  # noqa: F811
    """mini-swe-agent's default agent, model (litellm) and local environment, with its default
    config, for two steps: each turn must come back as one `bash` call, whose output goes back
    to the server as a `tool` message. The random model is made to call bash by a forced
    tool_choice; a +100 bias on the quote token closes the command at once, so what runs is the
    empty command (a random model's command is never run)."""
    monkeypatch.setenv("MSWEA_SILENT_STARTUP", "1")
    monkeypatch.setenv("MSWEA_COST_TRACKING", "ignore_errors")
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.config import get_config_from_spec
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.litellm_model import LitellmModel

    quote = server.engine.tokenizer.convert_tokens_to_ids('"')
    config = get_config_from_spec("default.yaml")
    model_kwargs = config["model"].get("model_kwargs", {}) | {
        "api_base": server.url + "/v1", "api_key": "k", "temperature": 0, "max_tokens": 100,
        "tool_choice": {"type": "function", "function": {"name": "bash"}}, "parallel_tool_calls": False,
        "logit_bias": {str(quote): 100},
    }  # fmt: skip
    model = LitellmModel(
        **(config["model"] | {"model_name": f"openai/{MODEL}", "model_kwargs": model_kwargs}),
        cost_tracking="ignore_errors",
    )
    env = LocalEnvironment(**(config["environment"] | {"cwd": str(tmp_path)}))
    agent = DefaultAgent(model, env, **(config["agent"] | {"step_limit": 2}))
    result = agent.run("Fix calc.py")
    assert result["exit_status"] == "LimitsExceeded", agent.messages[-1]
    calls = [m for m in agent.messages if m["role"] == "assistant"]
    tool_results = [m for m in agent.messages if m["role"] == "tool"]
    assert len(calls) == 2 and len(tool_results) == 2
    for call, result in zip(calls, tool_results, strict=True):
        (tc,) = call["tool_calls"]
        assert tc["function"]["name"] == "bash" and json.loads(tc["function"]["arguments"]) == {"command": ""}
        assert result["tool_call_id"] == tc["id"] and "<returncode>0</returncode>" in result["content"]
