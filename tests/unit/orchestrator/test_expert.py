"""The quickstart's scripted expert: careful and careless plans, played through a real sandbox."""

from __future__ import annotations

import asyncio

import pytest

from inhabit.harness.config import HarnessConfig
from inhabit.orchestrator.quickstart.expert import expert_plans, expert_transcripts
from inhabit.orchestrator.quickstart.tasks import generate, write_quick_task
from inhabit.sandbox import SandboxConfig, create_provider


def first_tool(actions) -> str:
    return actions[0][0][0]


def test_plans_add_a_careless_share_on_top_of_one_careful_plan_per_task():
    tasks = generate(10, seed=3)
    plans = expert_plans(tasks, 0.0, seed=0)
    assert [i for i, _ in plans] == list(range(10))
    assert {first_tool(a) for _, a in plans} == {"read_file"}

    plans = expert_plans(tasks, 0.5, seed=0)
    careless = [(i, a) for i, a in plans if first_tool(a) == "edit_file"]
    assert len(plans) == 15 and len(careless) == 5
    assert len({i for i, _ in careless}) == 5  # five different tasks
    for i, actions in careless:  # one reply: the guessed edit, then finish; no read
        (reply,) = actions
        assert [tool for tool, _ in reply] == ["edit_file", "finish"]
        assert reply[0][1]["path"] == f"{tasks[i].module}.py"
    assert expert_plans(tasks, 0.5, seed=0) == plans
    assert expert_plans(tasks, 0.5, seed=1) != plans
    assert len(expert_plans(tasks, 1.0, seed=0)) == 20


def test_careless_share_out_of_range_is_refused():
    with pytest.raises(ValueError, match="careless"):
        expert_plans(generate(2, seed=0), 1.5, seed=0)


def test_careless_edits_earn_reward_only_when_the_guess_is_exact(tmp_path):
    """Through the harness and grading: every careful transcript solves its task; a careless one
    solves it exactly when its guessed `old` line is the module's buggy line."""
    tasks = generate(8, seed=5)
    pairs = [(t, write_quick_task(tmp_path, t)) for t in tasks]
    plans = expert_plans(tasks, 1.0, seed=2)
    lucky = sum(
        1
        for i, a in plans
        if first_tool(a) == "edit_file" and a[0][0][1]["old"] == tasks[i].buggy.line(tasks[i].wrong_op)
    )
    provider = create_provider(SandboxConfig(backend="process"))
    harness = HarnessConfig(max_turns=4)
    solved = asyncio.run(expert_transcripts(pairs, provider, harness, grade=True, careless=1.0, seed=2))
    everything = asyncio.run(expert_transcripts(pairs, provider, harness, careless=1.0, seed=2))
    assert len(everything) == 16
    assert len(solved) == 8 + lucky
    blind = [t for t in everything if t.tool_calls[0].tool == "edit_file"]
    assert len(blind) == 8
    assert sum(t.tool_calls[0].error for t in blind) == 8 - lucky  # "old text not found"


def test_a_lucky_guess_exists_for_some_seed():
    """The guess space is small enough (8 argument pairs x 2 operators) that guesses sometimes
    hit: the careless habit is rewarded now and then, as a real careless agent's would be."""
    tasks = generate(64, seed=0)
    rng_hits = 0
    for i, actions in expert_plans(tasks, 1.0, seed=0):
        if first_tool(actions) == "edit_file":
            rng_hits += actions[0][0][1]["old"] == tasks[i].buggy.line(tasks[i].wrong_op)
    assert 0 < rng_hits < 16
