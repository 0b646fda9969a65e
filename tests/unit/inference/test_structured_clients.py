"""Structured output through the agent frameworks' own flows, against `inhabit serve`, offline.

Needs the `clients` extra (`pip install -e .[clients]`: langchain-openai, openai-agents); each test
skips without its package. The server and the random tiny model are test_constrained.py's: only
constrained decoding can make its answers parse as the `Weather` model.
"""

from __future__ import annotations

import asyncio
import importlib.util

import pytest
from test_constrained import MODEL, Weather, folder, server  # noqa: F401

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
