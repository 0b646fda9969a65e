"""OpenAIPolicy against inhabit's own server: the RL fields survive the trip into a TurnRecord.

The harness talks to remote models only through OpenAIPolicy, so token ids, logprobs, per-token
policy versions and MoE routes must arrive in the shape the trainer reads (TurnRecord), with the
routes of prompt and completion split at the prompt length.
"""

from __future__ import annotations

import asyncio

import pytest

from inhabit.contracts import Message
from inhabit.harness.loop import _turn_record
from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.openai_policy import OpenAIPolicy
from inhabit.inference.server import BackgroundServer, create_app


@pytest.fixture(scope="module")
def moe_server(tmp_path_factory):
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    folder = save_model_folder(
        build_tiny_model("moe-2m", vocab_size=len(tok), seed=0), tok, tmp_path_factory.mktemp("m") / "moe"
    )
    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    app = create_app(engine, engine.tokenizer, model_name="tiny-moe", api_key="k")
    with BackgroundServer(app) as srv:
        yield srv
    asyncio.run(engine.close())


async def test_openai_policy_carries_tokens_logprobs_versions_and_routes(moe_server):
    policy = OpenAIPolicy(moe_server.url + "/v1", "tiny-moe", api_key="k", logprobs=True)
    try:
        turn = await policy.next_turn(
            [Message("system", "You fix bugs."), Message("user", "Fix calc.py")], max_tokens=8
        )
    finally:
        await policy.close()
    n = len(turn.completion_token_ids)
    assert n >= 1
    assert len(turn.logprobs) == n and all(lp <= 0 for lp in turn.logprobs)
    assert turn.versions == [0] * n
    assert len(turn.routed_experts) == n
    assert len(turn.prompt_routed_experts) == len(turn.prompt_token_ids) - 1
    layers, k = len(turn.routed_experts[0]), len(turn.routed_experts[0][0])
    assert layers >= 1 and k == 2
    record = _turn_record(turn, "action", 0.0)
    assert record.prompt_routed_experts == turn.prompt_routed_experts
    assert record.routed_experts == turn.routed_experts
