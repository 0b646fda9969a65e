"""LocalPolicy: the harness Policy over an engine, with exact token counts and RL facts."""

from __future__ import annotations

from inhabit.contracts import Message, PolicyTurn
from inhabit.inference.local_policy import LocalPolicy

MESSAGES = [Message("system", "You fix bugs."), Message("user", "The test fails. Fix calc.py.")]


async def test_from_path_turn_carries_tokens_logprobs_routes(moe_folder):
    policy = LocalPolicy.from_path(moe_folder, seed=0)
    try:
        turn = await policy.next_turn(MESSAGES, max_tokens=16)
        n = policy.count_tokens(MESSAGES)
        tok = policy.tokenizer
        assert isinstance(turn, PolicyTurn)
        assert turn.prompt_tokens == n == len(turn.prompt_token_ids)
        rendered = tok.apply_chat_template(
            [{"role": m.role, "content": m.content} for m in MESSAGES],
            add_generation_prompt=True,
            tokenize=False,
        )
        assert turn.prompt_token_ids == tok(rendered, add_special_tokens=False)["input_ids"]
        k = turn.completion_tokens
        assert 1 <= k <= 16 and len(turn.logprobs) == len(turn.versions) == len(turn.routed_experts) == k
        assert len(turn.prompt_routed_experts) == n - 1
        assert turn.text == tok.decode(turn.completion_token_ids, skip_special_tokens=True)
        # The next turn's rendering starts with this turn's prompt + completion (template contract).
        if turn.finish_reason == "stop":
            follow = [*MESSAGES, Message("assistant", turn.text), Message("user", "ok")]
            assert policy.render(follow)[: n + k] == turn.prompt_token_ids + turn.completion_token_ids
        stopped = await policy.next_turn(MESSAGES, max_tokens=16, stop=["<tool"])
        assert "<tool" not in stopped.text
        # A prompt that fills the window yields an empty turn, not an exception.
        long = [Message("user", "x " * (policy.context_window * 2))]
        full = await policy.next_turn(long, max_tokens=8)
        assert full.finish_reason == "length" and full.text == "" and full.error
    finally:
        await policy.close()
