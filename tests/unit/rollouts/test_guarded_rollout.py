"""guarded_rollout: the one place a rollout's timeout, crash and engine failure become data."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.harness.config import HarnessConfig
from inhabit.harness.replay import ReplayPolicy
from inhabit.rollouts import guarded_rollout
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.taskgen.families.quickstart import generate, write_quick_task
from inhabit.taskgen.families.quickstart_expert import expert_actions
from inhabit.tasks.task import load_task


class Scripted(Policy):
    """Answers with a fixed turn after `delay_s`, or raises: the policy side of the failures."""

    def __init__(self, *, delay_s: float = 0.0, finish_reason: str = "stop", error: bool = False) -> None:
        self.delay_s, self.finish_reason, self.error = delay_s, finish_reason, error

    async def next_turn(self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()):
        await asyncio.sleep(self.delay_s)
        if self.error:
            raise RuntimeError("policy blew up")
        text = '<tool name="finish"><message>done</message></tool>'
        return PolicyTurn(text=text, finish_reason=self.finish_reason)

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(len(m.content) for m in messages) // 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    (qt,) = generate(1, seed=0)
    task = load_task(write_quick_task(tmp_path_factory.mktemp("tasks"), qt))
    return qt, task, create_provider(SandboxConfig(backend="process")), HarnessConfig(max_turns=4)


def run(setup, policy, timeout_s=30.0, deadline_s=None):
    _, task, provider, harness = setup
    return asyncio.run(guarded_rollout(task, policy, provider, harness, timeout_s, deadline_s=deadline_s))


def test_a_good_episode_passes_through(setup):
    traj = run(setup, ReplayPolicy(expert_actions(setup[0])))
    assert traj.status == "finished" and traj.error is None


def test_rollout_timeout_is_a_failed_trajectory(setup):
    traj = run(setup, Scripted(delay_s=5.0), timeout_s=0.3)
    assert traj.status == "error" and "timeout" in traj.error


def test_deadline_before_the_timeout_is_a_cut_not_data(setup):
    assert run(setup, Scripted(delay_s=5.0), timeout_s=30.0, deadline_s=0.3) is None
    assert run(setup, Scripted(delay_s=5.0), timeout_s=0.3, deadline_s=0.3) is None  # a tie: the deadline
    # a deadline after the rollout timeout leaves the timeout in charge: data again
    traj = run(setup, Scripted(delay_s=5.0), timeout_s=0.3, deadline_s=10.0)
    assert traj is not None and traj.status == "error"


def test_engine_error_in_a_turn_marks_the_episode_policy_error(setup):
    traj = run(setup, Scripted(finish_reason="error"))
    assert traj.status == "policy_error" and "engine error" in traj.error


def test_a_crash_inside_the_rollout_becomes_a_failed_trajectory(setup, monkeypatch):
    """The last guard: whatever escapes run_rollout (a bug, a broken provider) is data, not a crash."""
    import inhabit.rollouts as rollouts

    async def broken(*args, **kwargs):
        raise RuntimeError("provider went away")

    monkeypatch.setattr(rollouts, "run_rollout", broken)
    traj = run(setup, ReplayPolicy(expert_actions(setup[0])))
    assert traj.status == "error" and traj.error == "RuntimeError: provider went away"


def test_a_policy_that_raises_is_recorded_by_the_harness(setup):
    traj = run(setup, Scripted(error=True))
    assert traj is not None and traj.status != "finished" and traj.error
