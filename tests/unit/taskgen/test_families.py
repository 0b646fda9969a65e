"""Generated task families (`inhabit tasks generate`): the multistep family's tasks are valid under
`tasks check` in a real sandbox, hide the bug's location, differ between train and held-out, and
are the same bytes for the same seed; the quickstart family comes through the same command."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.grading.check import check_task
from inhabit.grading.grader import grade
from inhabit.harness.config import HarnessConfig
from inhabit.harness.loop import run_episode
from inhabit.harness.parse import render_call
from inhabit.harness.prompts import SUMMARY_PROMPT
from inhabit.taskgen.families import multistep, multistep_templates
from inhabit.taskgen.families.multistep import READ_WINDOW, generate, write_multistep_tasks
from inhabit.taskgen.families.quickstart import generate as quick_generate
from inhabit.taskgen.families.quickstart import write_quick_task
from inhabit.tasks.task import load_task


def _files(top: Path) -> dict[str, bytes]:
    return {str(p.relative_to(top)): p.read_bytes() for p in sorted(top.rglob("*")) if p.is_file()}


def _generate(*args: str) -> object:
    return CliRunner().invoke(app, ["tasks", "generate", *args])


def test_same_seed_same_bytes_other_seed_other_tasks(tmp_path: Path):
    for name, seed in (("a", "3"), ("b", "3"), ("c", "4")):
        result = _generate(
            "--family", "multistep", "--count", "6", "--out", str(tmp_path / name), "--seed", seed
        )
        assert result.exit_code == 0, result.output
        assert "wrote 6 multistep tasks" in result.output
    a, b, c = (_files(tmp_path / n) for n in "abc")
    assert a == b
    assert a != c
    assert len([f for f in a if f.endswith("task.toml")]) == 6
    manifest = [json.loads(line) for line in (tmp_path / "a" / "manifest.jsonl").read_text().splitlines()]
    assert [m["id"] for m in manifest] == [f"ms-train-{i:04d}" for i in range(6)]


def test_quickstart_family_through_the_same_command(tmp_path: Path):
    result = _generate(
        "--family", "quickstart", "--count", "4", "--out", str(tmp_path / "cli"), "--seed", "2"
    )
    assert result.exit_code == 0, result.output
    for t in quick_generate(4, 2):
        write_quick_task(tmp_path / "direct", t)
    assert _files(tmp_path / "cli") == _files(tmp_path / "direct")


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (["--family", "nope"], "--family"),
        (["--family", "quickstart", "--split", "held-out"], "--split"),
        (["--family", "multistep", "--long-share", "1.5"], "--long-share"),
    ],
)
def test_bad_arguments_say_what_to_do(tmp_path: Path, args: list[str], hint: str):
    result = _generate(*args, "--count", "2", "--out", str(tmp_path / "o"))
    assert result.exit_code == 2
    assert hint in result.output
    assert not (tmp_path / "o").exists()


def test_held_out_packages_are_not_copies_of_train_ones():
    train = generate(40, 0, "train", long_share=0.0)
    held = generate(40, 0, "held-out", long_share=0.0)

    def modules(tasks: list[multistep.MultiTask]) -> set[str]:
        return {src for t in tasks for path, src in t.workspace.items() if not path.startswith("tests/")}

    assert modules(train).isdisjoint(modules(held))
    assert {t.package for t in train}.isdisjoint({t.package for t in held})
    assert all(t.id.startswith("ms-heldout-") for t in held)


def test_fresh_names_are_none_of_either_splits_names():
    """`fresh_names` tasks (a bootstrap's extra transcripts) are train domains under made-up names:
    no package, module or function name of the train or held-out split, and never a held-out domain's
    code."""
    fresh = generate(40, 0, "train", long_share=0.25, fresh_names=True)
    listed = multistep._RESERVED
    for t in fresh:
        assert t.id.startswith("ms-fresh-") and t.package not in listed
        paths = [p for p in t.workspace if not p.startswith("tests/")]
        assert {Path(p).stem for p in paths} - {"__init__"} and all(
            Path(p).stem not in listed for p in paths if not p.endswith("__init__.py")
        )
        assert t.bug["function"] not in listed and f"`{t.package}`" in t.instruction
    assert len({t.package for t in fresh}) >= 35  # not a few names again
    # Every helper module is a train template's (its first line, the docstring, says which).
    train_heads = {m.source.splitlines()[0] for m in multistep_templates.TRAIN}
    facade_head = '"""The functions callers use; they compose the helper modules."""'
    for t in fresh:
        heads = {
            src.splitlines()[0]
            for p, src in t.workspace.items()
            if p.startswith(t.package + "/") and not p.endswith("__init__.py")
        }
        assert heads <= train_heads | {facade_head}, heads
    assert generate(5, 0, fresh_names=True)[0].workspace == fresh[0].workspace  # deterministic
    with pytest.raises(ValueError, match="train domains only"):
        generate(2, 0, "held-out", fresh_names=True)


def test_the_instruction_names_the_failing_test_not_the_bug():
    for t in generate(30, 1, long_share=0.3):
        module, function = t.bug["module"], t.bug["function"]
        helpers = [p for p in t.workspace if not p.startswith("tests/") and not p.endswith("__init__.py")]
        assert 3 <= len(helpers) <= 6
        assert module.rsplit("/", 1)[1] not in t.instruction and function not in t.instruction
        visible_failing = [n for n in t.fail_to_pass if "_hidden.py" not in n]
        assert len(visible_failing) >= 1 and visible_failing[0] in t.instruction
        # The failing visible test is a facade test: the bug's own module has no failing visible test.
        assert all(not n.startswith(f"tests/test_{Path(module).stem}.py") for n in visible_failing)
        assert any("_hidden.py" in n for n in t.fail_to_pass)
        assert t.workspace[module].count(t.bug["new"]) >= 1
        assert f"You have {t.turn_budget} turns" in t.instruction


def test_long_variants_need_more_reading():
    tasks = generate(12, 5, long_share=0.5)
    long, short = [t for t in tasks if t.long], [t for t in tasks if not t.long]
    assert long and short
    for t in long:
        assert t.workspace[t.bug["module"]].count("\n") > READ_WINDOW
        assert t.turn_budget == multistep.SEQUENTIAL_TURNS + 2
    for t in short:
        assert t.workspace[t.bug["module"]].count("\n") < READ_WINDOW
        assert t.turn_budget == multistep.SEQUENTIAL_TURNS + 1
    size = {t.long: sum(len(s) for s in t.workspace.values()) for t in tasks}
    assert size[True] > 5 * size[False]


@pytest.mark.slow  # ~20 s: task check of every generated task
async def test_generated_tasks_pass_task_check(tmp_path: Path, sandbox_provider, fast_command: str):
    """A normal and a long train task, a held-out task and one under fresh names: the bug fails the named tests, the
    reference patch fixes them, every other test passes, grading raises no flag."""
    short = next(t for t in generate(6, 7, long_share=0.0))
    long = next(t for t in generate(6, 7, long_share=1.0))
    held = next(t for t in generate(6, 7, "held-out", long_share=0.0))
    fresh = next(t for t in generate(6, 7, long_share=0.0, fresh_names=True))
    for i, t in enumerate((short, long, held, fresh)):
        (root,) = write_multistep_tasks(tmp_path / str(i), [t], command=fast_command)
        report = await check_task(root, sandbox_provider)
        assert report.valid, [str(p) for p in report.problems]
        task = load_task(root)
        assert task.hidden_files() == [f"tests/test_{t.package}_hidden.py"]
        assert not any(f.endswith("_hidden.py") for f in task.workspace_files())


class ScriptPolicy(Policy):
    """The test's own input: turns from a script, a fixed line as each summary.

    Tokens are counted as characters / 4, and a request larger than the window raises, as a real
    engine would."""

    def __init__(self, turns: list[str], window: int) -> None:
        self.turns = list(turns)
        self.context_window = window

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return sum(len(m.content) // 4 + 4 for m in messages)

    async def next_turn(
        self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()
    ) -> PolicyTurn:
        if self.count_tokens(messages) + max_tokens > self.context_window:
            raise RuntimeError("request exceeds the window")
        if messages[-1].content == SUMMARY_PROMPT:
            return PolicyTurn(
                text="summary: the facade calls the helper; the bug is in its module", completion_tokens=12
            )
        text = self.turns.pop(0)
        return PolicyTurn(text=text, completion_tokens=len(text) // 4)


async def test_a_sequential_agent_meets_the_long_budget_exactly_through_summaries(
    tmp_path: Path, sandbox_provider, fast_command: str
):
    """A long variant, solved one call a turn through the real harness in a 6,000-token window:
    it takes exactly the task's turn budget, the context overflows (the harness summarizes), and
    the fix grades 1."""
    t = next(
        t for t in generate(10, 11, long_share=1.0) if t.workspace[t.bug["module"]].count(t.bug["new"]) == 1
    )
    (root,) = write_multistep_tasks(tmp_path, [t], command=fast_command)
    task = load_task(root)
    test_file = next(n for n in t.fail_to_pass if "_hidden.py" not in n).split("::")[0]
    facade = f"{t.package}/{Path(test_file).stem.removeprefix('test_')}.py"
    module = t.bug["module"]
    script = [
        render_call("run_tests", {}),
        render_call("read_file", {"path": test_file}),
        render_call("read_file", {"path": facade}),
        render_call("read_file", {"path": module}),
        render_call("read_file", {"path": module, "start_line": str(READ_WINDOW + 1)}),
        render_call("edit_file", {"path": module, "old": t.bug["new"], "new": t.bug["old"]}),
        render_call("run_tests", {}),
        render_call("finish", {"message": "fixed"}),
    ]
    assert len(script) == t.turn_budget
    config = HarnessConfig(max_turns=t.turn_budget, max_turn_tokens=200, summary_max_tokens=100)
    sandbox = await sandbox_provider.create(task.workspace_dir)
    try:
        traj = await run_episode(
            ScriptPolicy(script, window=6000),
            sandbox,
            t.instruction,
            config=config,
            test_command=fast_command,
        )
        assert traj.status == "finished", traj.error
        assert len(traj.summaries) >= 1
        assert [c.tool for c in traj.tool_calls] == [
            "run_tests", "read_file", "read_file", "read_file", "read_file", "edit_file", "run_tests", "finish",
        ]  # fmt: skip
        # Only the first run_tests reports failing tests (the bug); every other call succeeds.
        assert [i for i, c in enumerate(traj.tool_calls) if c.error] == [0]
        result = await grade(task, sandbox, sandbox_provider)
        assert result.reward == 1.0, result
    finally:
        await sandbox.close()


async def test_an_agent_that_batches_needs_five_turns(tmp_path: Path, sandbox_provider, fast_command: str):
    """The same kind of task with independent calls sharing a turn: 5 turns, under the budget."""
    t = next(
        t for t in generate(10, 11, long_share=1.0) if t.workspace[t.bug["module"]].count(t.bug["new"]) == 1
    )
    (root,) = write_multistep_tasks(tmp_path, [t], command=fast_command)
    task = load_task(root)
    test_file = next(n for n in t.fail_to_pass if "_hidden.py" not in n).split("::")[0]
    facade = f"{t.package}/{Path(test_file).stem.removeprefix('test_')}.py"
    module = t.bug["module"]
    script = [
        render_call("run_tests", {}) + render_call("read_file", {"path": test_file})
        + render_call("read_file", {"path": facade}),
        render_call("read_file", {"path": module})
        + render_call("read_file", {"path": module, "start_line": str(READ_WINDOW + 1)}),
        render_call("edit_file", {"path": module, "old": t.bug["new"], "new": t.bug["old"]}),
        render_call("run_tests", {}),
        render_call("finish", {"message": "fixed"}),
    ]  # fmt: skip
    config = HarnessConfig(max_turns=t.turn_budget, max_turn_tokens=200, summary_max_tokens=100)
    sandbox = await sandbox_provider.create(task.workspace_dir)
    try:
        traj = await run_episode(
            ScriptPolicy(script, window=16000),
            sandbox,
            t.instruction,
            config=config,
            test_command=fast_command,
        )
        assert traj.status == "finished", traj.error
        assert len(script) == 5 < t.turn_budget
        assert len(traj.tool_calls) == 8
        assert (await grade(task, sandbox, sandbox_provider)).reward == 1.0
    finally:
        await sandbox.close()
