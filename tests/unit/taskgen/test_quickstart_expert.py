"""The quickstart's scripted expert: careful and careless plans, played through a real sandbox."""

from __future__ import annotations

import asyncio

import pytest

from inhabit.harness.config import HarnessConfig
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.taskgen.families.quickstart import generate, write_quick_task
from inhabit.taskgen.families.quickstart_expert import expert_plans, expert_transcripts


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


def careless_kind(task, actions) -> str:
    """What a careless plan's guessed `old` line is in the module."""
    old = actions[0][0][1]["old"]
    if old == task.buggy.line(task.wrong_op):
        return "exact"
    if any(old == f.line() for j, f in enumerate(task.fns) if j != task.bug):
        return "other_function"
    return "absent"


def test_careless_edits_solve_only_exact_guesses_and_can_break_the_other_function(tmp_path):
    """Through the harness and grading: every careful transcript solves its task; a careless one
    solves it exactly when its guess is the buggy line; a guess that is the other function's line
    applies (no tool error) and breaks that function; any other guess is "old text not found".
    (tasks seed 8, plan seed 3: chosen so that every kind occurs.)"""
    tasks = generate(10, seed=8)
    pairs = [(t, write_quick_task(tmp_path, t)) for t in tasks]
    plans = expert_plans(tasks, 1.0, seed=3)
    kinds = [careless_kind(tasks[i], a) for i, a in plans if first_tool(a) == "edit_file"]
    assert {"exact", "other_function", "absent"} <= set(kinds)
    provider = create_provider(SandboxConfig(backend="process"))
    harness = HarnessConfig(max_turns=4)
    trajs = asyncio.run(expert_transcripts(pairs, provider, harness, grade=True, careless=0.0, seed=3))
    assert len(trajs) == 10  # careful: all solved (grade=True keeps only reward-1 transcripts)
    everything = asyncio.run(expert_transcripts(pairs, provider, harness, careless=1.0, seed=3))
    assert len(everything) == 20
    blind = [t for t in everything if t.tool_calls[0].tool == "edit_file"]
    assert len(blind) == 10
    by_task = {t.id: t for t in tasks}
    for traj in blind:
        task = by_task[traj.task_id]
        (actions,) = [a for i, a in plans if tasks[i].id == task.id and first_tool(a) == "edit_file"]
        kind = careless_kind(task, actions)
        assert traj.tool_calls[0].error == (kind == "absent"), (kind, traj.tool_calls[0].observation)
    solved = asyncio.run(expert_transcripts(pairs, provider, harness, grade=True, careless=1.0, seed=3))
    assert len(solved) == 10 + kinds.count("exact")


def test_a_lucky_guess_exists_for_some_seed():
    """The guess space is small enough (8 argument pairs x 2 operators) that guesses sometimes
    hit: the careless habit is rewarded now and then, as a real careless agent's would be."""
    tasks = generate(64, seed=0)
    rng_hits = 0
    for i, actions in expert_plans(tasks, 1.0, seed=0):
        if first_tool(actions) == "edit_file":
            rng_hits += actions[0][0][1]["old"] == tasks[i].buggy.line(tasks[i].wrong_op)
    assert 0 < rng_hits < 16
