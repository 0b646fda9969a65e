"""The multistep family's scripted expert: its plans, and its episodes through a real sandbox."""

from __future__ import annotations

import random
import re
from dataclasses import replace

import pytest

from inhabit.orchestrator.quickstart.bootstrap import quickstart_tokenizer, transcript_examples
from inhabit.taskgen.families.multistep import generate, write_multistep_tasks
from inhabit.taskgen.families.multistep_expert import ExpertStyle, _def_pattern, expert_plan

SLACK = 2  # turns over the task's budget a wasteful episode may take


def test_plans_are_sequential_sometimes_wasteful_and_rarely_batched():
    tasks = generate(40, 5, long_share=0.3)
    rng = random.Random(0)
    plans = [expert_plan(t, rng) for t in tasks]
    turns = [len(p.turns) for p in plans]
    over = [n - t.turn_budget for n, t in zip(turns, tasks, strict=True)]
    assert min(over) >= -1 and max(over) <= SLACK  # -1: a batched first turn saves one
    assert sum(o > 0 for o in over) >= 5  # some plans waste a turn
    batched = [p for p in plans if any(len(turn) > 1 for turn in p.turns)]
    assert 0 < len(batched) <= 10  # rarely batched, and then only the first turn
    assert all(len(turn) == 1 for p in plans for turn in p.turns[1:])
    for p, t in zip(plans, tasks, strict=True):
        edit = next(c for turn in p.turns for c in turn if c[0] == "edit_file")[1]
        assert edit["path"] == t.bug["module"] and t.bug["new"] in edit["old"]
        assert t.workspace[t.bug["module"]].count(edit["old"]) == 1
        assert [c[0] for c in p.turns[-2]] == ["run_tests"] and p.turns[-1][0][0] == "finish"
    # a plan with no waste and no batching takes exactly the budget
    plain = ExpertStyle(redundant_read=0.0, extra_tests=0.0, batch=0.0)
    assert all(len(expert_plan(t, rng, plain).turns) == t.turn_budget for t in tasks)


@pytest.mark.slow  # 20-40 s: ten sandboxed, graded episodes
def test_expert_episodes_solve_their_tasks_within_the_budget_and_summarize_long_ones(
    tmp_path, play_multistep_expert
):
    """Through the harness, a real sandbox and grading: every episode earns reward 1 within its
    turn budget plus slack; in a 1,024-token window (the multistep config's) long variants summarize,
    and every segment, summary ones included, becomes a training example with learned tokens."""
    # two tasks under made-up names too: what `model.bootstrap.fresh_names` has the expert play
    fresh = generate(2, 2, long_share=0.0, fresh_names=True)
    tasks = [t for t in generate(12, 2, long_share=0.5)][:8] + fresh
    assert any(t.long for t in tasks) and not all(t.long for t in tasks)
    roots = write_multistep_tasks(tmp_path, tasks)
    tok = quickstart_tokenizer()
    trajs = play_multistep_expert(tasks, roots, tok, seed=1)
    assert len(trajs) == len(tasks)  # every transcript graded reward 1 (others are left out)
    by_id = {t.id: t for t in tasks}
    # some summary requests had to drop their segment's oldest turns to fit the window (the case
    # whose action turns transcript_examples rebuilds)
    assert any(
        sum(m.role == "assistant" for m in s.messages) - 1 < sum(t.kind == "action" for t in s.turns)
        for traj in trajs
        for s in traj.segments
        if s.summary is not None
    )
    for traj in trajs:
        task = by_id[traj.task_id]
        assert traj.reward == 1.0
        assert traj.num_turns <= task.turn_budget + SLACK
        if task.long:
            assert len(traj.summaries) >= 1 and len(traj.segments) == len(traj.summaries) + 1
            assert "Next:" in traj.summaries[0]
        examples = transcript_examples(tok, traj)
        assert len(examples) >= len(traj.segments)
        assert all(any(mask) and len(ids) <= 1024 for ids, mask in examples)
        # every generation is trained exactly once, the action turns whose context the summary
        # request had to drop included (a trained message is one run of loss tokens)
        runs = sum(m and not p for _, mask in examples for p, m in zip([False, *mask], mask, strict=False))
        assert runs == traj.num_turns + len(traj.summaries)


def test_grepping_expert_copies_the_module_path_out_of_greps_output():
    """With `grep`, the expert greps for the buggy helper's `def` after the facade and reads the
    path grep printed: a normal variant takes one turn over its budget, a long one whose bug lies in
    the grepped function's lines reads them in one call and keeps its budget."""
    tasks = generate(40, 3, long_share=0.5)
    style = ExpertStyle(redundant_read=0.0, extra_tests=0.0, batch=0.0, grep=1.0)
    rng = random.Random(0)
    one_read = 0
    for t in tasks:
        plan = expert_plan(t, rng, style)
        calls = [c for turn in plan.turns for c in turn]
        at = next(i for i, c in enumerate(calls) if c[0] == "grep")
        assert calls[at - 1][0] == calls[at + 1][0] == "read_file"
        assert calls[at + 1][1]["path"] == t.bug["module"]
        pattern = re.compile(calls[at][1]["pattern"])
        hits = [(path, i) for path, text in t.workspace.items() for i, row in enumerate(text.split("\n"), 1)
                if pattern.search(row)]  # fmt: skip
        assert len(hits) == 1 and hits[0][0] == t.bug["module"]
        if "start_line" in calls[at + 1][1]:
            span = calls[at + 1][1]
            assert t.long and span["start_line"] == hits[0][1]
            window = "\n".join(
                t.workspace[t.bug["module"]].split("\n")[span["start_line"] - 1 : span["end_line"]]
            )
            edit = next(c[1] for c in calls if c[0] == "edit_file")
            assert edit["old"] in window  # the edit's whole text lies in the one read
            one_read += 1
        assert len(plan.turns) == t.turn_budget + (0 if "start_line" in calls[at + 1][1] else 1)
    assert one_read > 0


def test_grep_pattern_singles_out_the_def_or_the_expert_reads_without_grep():
    task = next(t for t in generate(12, 3) if t.bug["function"])
    fn, module = task.bug["function"], task.bug["module"]
    other = next(path for path in task.workspace if path.endswith(".py") and path != module)
    pattern, line = _def_pattern(task, fn)
    assert pattern == f"def {fn}"
    assert task.workspace[module].split("\n")[line - 1].startswith(f"def {fn}(")
    # another function whose name starts with the helper's: the pattern takes the parenthesis
    longer = replace(
        task, workspace={**task.workspace, other: task.workspace[other] + f"\ndef {fn}_total(x):\n"}
    )
    assert _def_pattern(longer, fn) == (rf"def {fn}\(", line)
    # the same name defined twice: no pattern singles it out, and the plan reads as without grep
    twice = replace(task, workspace={**task.workspace, other: task.workspace[other] + f"\ndef {fn}(x):\n"})
    assert _def_pattern(twice, fn) is None
    plan = expert_plan(twice, random.Random(0), ExpertStyle(grep=1.0))
    assert not any(c[0] == "grep" for turn in plan.turns for c in turn)


@pytest.mark.slow  # ~15 s: four sandboxed, graded episodes
def test_grepping_expert_episodes_solve_their_tasks(tmp_path, play_multistep_expert):
    """Through the harness, a real sandbox and grading: grep prints one line, the `def` of the buggy
    helper in its module, the next read is of that path (a long module: from that line on), and
    every episode earns reward 1."""
    tasks = generate(24, 3, long_share=0.5)
    style = ExpertStyle(redundant_read=0.0, extra_tests=0.0, batch=0.0, grep=1.0)
    picked = [t for t in tasks if t.long][:2] + [t for t in tasks if not t.long][:2]
    assert len(picked) == 4
    roots = write_multistep_tasks(tmp_path, picked)
    trajs = play_multistep_expert(picked, roots, quickstart_tokenizer(), seed=0, style=style)
    assert len(trajs) == len(picked)  # every episode graded reward 1
    by_id = {t.id: t for t in picked}
    for traj in trajs:
        task = by_id[traj.task_id]
        at = next(i for i, c in enumerate(traj.tool_calls) if c.tool == "grep")
        grep, read = traj.tool_calls[at], traj.tool_calls[at + 1]
        path, line, text = grep.observation.split(":", 2)
        assert "\n" not in grep.observation and path == task.bug["module"]
        assert text.startswith(f"def {task.bug['function']}(")
        assert read.tool == "read_file" and read.args["path"] == path
        if task.long and "start_line" in read.args:
            assert int(read.args["start_line"]) == int(line)
            assert task.bug["new"] in read.observation  # the bug is in the one read
