"""The multistep family's scripted expert: a sequential, sometimes wasteful agent played through the
real harness, sandbox and tools (`inhabit.taskgen.families.multistep`).

Its episode is what a careful but unhurried engineer does, one call a turn: run the tests, read the
failing test's file, read the facade, read the buggy module (a long module in two reads: its first
400-line window, then the lines around the bug), replace the buggy expression with `edit_file`, run the
tests again, finish. That is exactly the task's turn budget. Some episodes waste a turn or two (a
redundant read of a file already seen, an extra `run_tests` before reading the module) and a few
batch the first two calls in one turn: the demonstrations teach the tools, the files to look at and
the fix, and leave the faster way (batching independent calls, no waste) for RL to find.

With `ExpertStyle.grep` (`model.bootstrap.grep`) an episode greps for the buggy helper's `def`
after the facade and reads the path grep printed, so the module's path is copied out of one line of
output instead of composed from the facade's `from . import module` and its `module.function(...)`
call. A normal variant then takes one turn over its budget; a long one whose edit lies within
`GREP_READ_LINES` of the `def` reads just those lines (grep gave their number) and keeps its budget.

The expert knows where the bug is (the task's manifest record) and edits the shortest text that is
unique in the module: the buggy expression itself where it is, else its line (widened to neighbouring
lines until unique), so the model that imitates it copies few tokens out of the file. When the context nears the window of
the model that will imitate it (`ExpertPolicy`: the model's tokenizer and context window), the
harness asks it for a summary like any policy, and it answers with what it has learned so far and
its next step, so the transcripts hold summary segments the bootstrap trains on.
"""

from __future__ import annotations

import asyncio
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inhabit.contracts import Message, PolicyTurn
from inhabit.harness.config import HarnessConfig
from inhabit.harness.replay import ReplayPolicy
from inhabit.harness.rollout import run_rollout
from inhabit.sandbox.base import SandboxProvider
from inhabit.taskgen.families.multistep import READ_WINDOW, MultiTask
from inhabit.tasks.task import load_task
from inhabit.types import Trajectory

Call = tuple[str, dict[str, Any]]


@dataclass(frozen=True)
class ExpertStyle:
    """How often the expert wastes a turn or batches one (per episode, independently)."""

    redundant_read: float = 0.25
    """Re-read the facade or the test file just before the edit."""
    extra_tests: float = 0.2
    """Run the tests once more before reading the buggy module."""
    batch: float = 0.1
    """Run the tests and read the test file in one turn (the one batched turn it ever makes)."""
    grep: float = 0.0
    """After the facade, grep for the buggy helper's `def` line, then read the path (and, in a long
    module, the lines) that grep printed: the module's path becomes a copy out of one observation
    instead of a composition of the facade's import and its call. 0: never (and no draw is made, so
    the other choices stay as they were)."""


@dataclass
class Plan:
    """The turns of one expert episode and, per turn, what the expert knows once it has run."""

    turns: list[list[Call]]
    notes: list[str]
    next_steps: list[str] = field(default_factory=list)


def _edit(source: str, buggy: str, fixed: str) -> tuple[str, str]:
    """(old, new) for edit_file: the shortest of the buggy expression, the buggy line without its
    indentation, and that line widened to neighbouring lines, that is unique in `source`. Every token
    of `old` is one the imitating model must copy exactly out of a read, so the fewer the better."""
    lines = source.split("\n")
    at = next(i for i, line in enumerate(lines) if buggy in line)
    if source.count(buggy) == 1:
        return buggy, fixed
    if source.count(line := lines[at].strip()) == 1:
        return line, line.replace(buggy, fixed, 1)
    lo, hi = at, at + 1
    while source.count("\n".join(lines[lo:hi])) > 1:
        lo, hi = max(0, lo - 1), min(len(lines), hi + 1)
    old = "\n".join(lines[lo:hi])
    return old, old.replace(buggy, fixed, 1)


GREP_READ_LINES = 40
"""Lines the grepping expert reads from a long module's `def` line (the function and its neighbours)."""


def _def_pattern(t: MultiTask, function: str) -> tuple[str, int] | None:
    """(pattern, line): the shortest grep pattern that matches `function`'s `def` line alone in the
    workspace (`def name`, or `def name\\(` where another name starts with it), and that line; None
    where no pattern singles it out (the expert then reads the module as it would without grep)."""
    module = t.workspace[t.bug["module"]]
    line = next(i for i, text in enumerate(module.split("\n"), 1) if text.startswith(f"def {function}("))
    for pattern in (f"def {function}", rf"def {function}\("):
        regex = re.compile(pattern)  # grep -P matches it anywhere in a line, as counted here
        if sum(bool(regex.search(row)) for text in t.workspace.values() for row in text.split("\n")) == 1:
            return pattern, line
    return None


def expert_plan(t: MultiTask, rng: random.Random, style: ExpertStyle = ExpertStyle()) -> Plan:
    """The expert's turns for task `t` (module docstring)."""
    m = re.match(r"The test (\S+)::(test_(\w+)) fails", t.instruction)
    assert m is not None, "multistep instructions name the failing facade test"
    test_file, fn = m.group(1), m.group(3).removesuffix("_other")
    facade = f"{t.package}/{Path(test_file).stem.removeprefix('test_')}.py"
    module, source = t.bug["module"], t.workspace[t.bug["module"]]
    old, new = _edit(source, t.bug["new"], t.bug["old"])
    line_no = source[: source.index(old)].count("\n") + 1
    n_lines = source.count("\n") + 1
    seen = f"{test_file}::test_{fn} fails"

    turns: list[list[Call]] = []
    notes: list[str] = []
    nexts: list[str] = []

    def add(calls: list[Call], note: str, nxt: str) -> None:
        turns.append(calls)
        notes.append(note)
        nexts.append(nxt)

    run_tests: Call = ("run_tests", {})
    read_test: Call = ("read_file", {"path": test_file})
    if rng.random() < style.batch:
        add([run_tests, read_test], seen, f"read {facade}")
    else:
        add([run_tests], seen, f"read {test_file}")
        add([read_test], f"{test_file} calls {fn}", f"read {facade}")
    helper = t.bug["function"]
    found = _def_pattern(t, helper) if style.grep and rng.random() < style.grep else None  # no draw at 0
    grepping = found is not None
    pattern, def_line = found or ("", 0)
    if grepping:
        add([("read_file", {"path": facade})], f"{fn} in {facade} calls {helper}", f"grep {pattern}")
    else:
        add([("read_file", {"path": facade})], f"{fn} in {facade} calls {module}", f"read {module}")
    if rng.random() < style.extra_tests:
        add([run_tests], "the same test still fails", f"grep {pattern}" if grepping else f"read {module}")
    if grepping:
        add(
            [("grep", {"pattern": pattern})],
            f"{helper} is defined in {module} line {def_line}",
            f"read {module}",
        )
    where = f"{module} line {line_no}: `{old.strip()}` should be `{new.strip()}`"
    last_line = line_no + old.count("\n")  # the edit's text may span lines
    if grepping and n_lines > READ_WINDOW and def_line <= line_no and last_line < def_line + GREP_READ_LINES:
        # grep gave the line: one read of the function's lines instead of the module's two windows
        span = {"start_line": def_line, "end_line": min(n_lines, def_line + GREP_READ_LINES - 1)}
        add([("read_file", {"path": module, **span})], where, "edit that line")
    elif n_lines > READ_WINDOW:
        add(
            [("read_file", {"path": module})],
            f"{module} has {n_lines} lines",
            f"read {module} near line {line_no}",
        )
        lo, hi = max(1, line_no - 20), min(n_lines, line_no + 20)
        add([("read_file", {"path": module, "start_line": lo, "end_line": hi})], where, "edit that line")
    else:
        add([("read_file", {"path": module})], where, "edit that line")
    if rng.random() < style.redundant_read:
        again = rng.choice([facade, test_file])
        add([("read_file", {"path": again})], f"re-read {again}", "edit that line")
    add(
        [("edit_file", {"path": module, "old": old, "new": new})],
        f"fixed {module} line {line_no}",
        "run the tests",
    )
    add([run_tests], "the tests pass", "finish")
    add([("finish", {"message": f"Fixed {module} line {line_no}."})], "done", "")
    return Plan(turns, notes, nexts)


class ExpertPolicy(ReplayPolicy):
    """Plays a `Plan`, counting tokens with the imitating model's tokenizer and window, so that the
    harness summarizes where the model's own episode would; its summary says what it has learned."""

    def __init__(self, plan: Plan, tokenizer: Any, context_window: int) -> None:
        super().__init__(plan.turns)
        self.plan = plan
        self.tokenizer = tokenizer
        self.context_window = context_window

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict] | None = None) -> int:
        from inhabit.models.tokenizer import encode_chat

        return len(encode_chat(self.tokenizer, messages, add_generation_prompt=True))

    def summary(self) -> str:
        done = self.plan.notes[: self._next][-3:]  # the latest facts: a summary must stay short
        nxt = self.plan.next_steps[self._next - 1] if self._next else "run the tests"
        return "\n".join([*(f"- {n}" for n in done), f"Next: {nxt}."])

    def summary_turn(self, tools: Sequence[dict[str, Any]] | None) -> PolicyTurn:
        return PolicyTurn(text=self.summary())


async def multistep_transcripts(
    tasks: Sequence[tuple[MultiTask, Path]],
    provider: SandboxProvider,
    harness: HarnessConfig,
    tokenizer: Any,
    context_window: int,
    *,
    seed: int = 0,
    style: ExpertStyle = ExpertStyle(),
    concurrency: int = 4,
    grade: bool = True,
) -> list[Trajectory]:
    """The expert's transcripts of every (task, task_dir); with `grade`, only those of episodes graded
    reward 1 (an unfinished one is always left out)."""
    sem = asyncio.Semaphore(concurrency)
    rng = random.Random(f"multistep-expert:{seed}")
    plans = [expert_plan(t, rng, style) for t, _ in tasks]

    async def one(plan: Plan, root: Path) -> Trajectory:
        async with sem:
            return await run_rollout(
                load_task(root), ExpertPolicy(plan, tokenizer, context_window), provider,
                config=harness, grade_episode=grade,
            )  # fmt: skip

    out = await asyncio.gather(*(one(p, root) for p, (_, root) in zip(plans, tasks, strict=True)))
    return [t for t in out if t.status == "finished" and (not grade or t.reward == 1.0)]
