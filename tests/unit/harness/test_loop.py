"""The episode loop with scripted policies: statuses, observations, and self-summarization."""

from __future__ import annotations

from collections.abc import Sequence

from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.harness.loop import run_episode
from inhabit.harness.parse import render_call
from inhabit.harness.prompts import NO_CALL_TEXT, SUMMARY_HEADER, SUMMARY_PROMPT
from inhabit.types import Trajectory


class ScriptedPolicy(Policy):
    """The test's own input: answers turns from a script, summaries with a fixed line.

    It refuses (raises) any request larger than its window, as a real engine would.
    """

    def __init__(self, turns: list[str], window: int = 8192) -> None:
        self.turns = list(turns)
        self.context_window = window
        self.largest_request = 0
        self.summary_requests = 0

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(len(m.content) // 4 + 4 for m in messages)

    async def next_turn(
        self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()
    ) -> PolicyTurn:
        used = self.count_tokens(messages)
        self.largest_request = max(self.largest_request, used)
        if used + max_tokens > self.context_window:
            raise RuntimeError(
                f"request of {used}+{max_tokens} tokens exceeds the window {self.context_window}"
            )
        if messages[-1].content == SUMMARY_PROMPT:
            self.summary_requests += 1
            return PolicyTurn(
                text=f"summary {self.summary_requests}: read big files, next read more", completion_tokens=12
            )
        text = self.turns.pop(0) if self.turns else render_call("finish", {"message": "script over"})
        return PolicyTurn(text=text, completion_tokens=len(text) // 4, versions=[7] * (len(text) // 4))


def read(path: str) -> str:
    return render_call("read_file", {"path": path})


async def test_an_episode_too_long_for_the_window_completes_through_summaries(sandbox, hconfig) -> None:
    for i in range(8):
        await sandbox.write_file(f"big{i}.txt", "".join(f"row {i}-{j} " * 8 + "\n" for j in range(60)))
    policy = ScriptedPolicy([read(f"big{i}.txt") for i in range(8)], window=3000)
    cfg = hconfig.model_copy(update={"max_turn_tokens": 200, "summary_max_tokens": 100})
    traj = await run_episode(policy, sandbox, "Read every big file.", config=cfg, task_id="t1")

    assert traj.status == "finished" and traj.error is None
    assert traj.final_message == "script over"
    total_observed = sum(len(c.observation) // 4 for c in traj.tool_calls)
    assert total_observed > 2 * policy.context_window  # the whole episode could never fit in one window
    assert policy.largest_request + cfg.max_turn_tokens <= policy.context_window
    assert len(traj.summaries) >= 2 and len(traj.segments) == len(traj.summaries) + 1
    for i, seg in enumerate(traj.segments):
        assert seg.index == i and seg.messages[0].role == "system"
        if i > 0:
            assert (
                SUMMARY_HEADER in seg.messages[1].content and traj.summaries[i - 1] in seg.messages[1].content
            )
        if seg.summary is not None:
            assert seg.turns[-1].kind == "summary" and seg.messages[-2].content == SUMMARY_PROMPT
    assert sum(1 for c in traj.tool_calls if c.tool == "read_file" and not c.error) == 8
    assert traj.segments[0].turns[0].versions == [7] * len(traj.segments[0].turns[0].versions or [])
    assert Trajectory.from_json(traj.to_json()) == traj


async def test_turn_limit_no_call_turns_and_token_budget(sandbox, hconfig) -> None:
    policy = ScriptedPolicy(["I am thinking."] * 5)
    traj = await run_episode(policy, sandbox, "x", config=hconfig.model_copy(update={"max_turns": 3}))
    assert traj.status == "turn_limit" and traj.num_turns == 3
    assert traj.segments[0].messages[3].content == NO_CALL_TEXT

    policy = ScriptedPolicy(["word " * 400] * 10)
    traj = await run_episode(
        policy, sandbox, "x", config=hconfig.model_copy(update={"max_total_tokens": 1000})
    )
    assert traj.status == "token_budget" and traj.num_turns == 2


async def test_policy_failure_is_a_failed_rollout_not_a_crash(sandbox, hconfig) -> None:
    class Broken(ScriptedPolicy):
        async def next_turn(self, messages, *, max_tokens, stop=()):
            raise ConnectionError("endpoint down")

    traj = await run_episode(Broken([]), sandbox, "x", config=hconfig)
    assert traj.status == "policy_error" and "endpoint down" in (traj.error or "")


async def test_a_task_larger_than_the_window_is_context_overflow(sandbox, hconfig) -> None:
    traj = await run_episode(ScriptedPolicy([], window=2000), sandbox, "y" * 20_000, config=hconfig)
    assert traj.status == "context_overflow" and "does not fit" in (traj.error or "")


async def test_reasoning_is_kept_out_of_tool_parsing_and_recorded(sandbox, hconfig) -> None:
    """A call written inside <think> is never run; the reasoning is on the turn's record."""
    await sandbox.write_file("secret.txt", "s")
    await sandbox.write_file("calc.py", "x = 1\n")
    thinking = f"<think>\nmaybe {read('secret.txt')} first?\n</think>\n\n{read('calc.py')}"
    policy = ScriptedPolicy([thinking, "plain text, no call", f"Done.\n</think>\n\n{read('calc.py')}"])
    traj = await run_episode(policy, sandbox, "Look at calc.py.", config=hconfig)
    assert [c.args.get("path") for c in traj.tool_calls if c.tool == "read_file"] == ["calc.py", "calc.py"]
    turns = traj.segments[0].turns
    assert turns[0].reasoning == f"maybe {read('secret.txt')} first?"
    assert turns[1].reasoning is None and turns[2].reasoning == "Done."
    assert Trajectory.from_json(traj.to_json()) == traj
