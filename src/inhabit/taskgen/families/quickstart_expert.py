"""The scripted expert: plays a quickstart task through the real harness, sandbox and tools.

Its episode is short on purpose (what a small model can learn to imitate): read the module, then
in one reply replace the buggy `return` line with `edit_file` and call `finish`. The transcripts
(`Trajectory` records, the same the RL rollouts write) are the bootstrap's training data, so the
model learns the tool grammar, the observation format and the code pattern from the very texts
the harness renders.

Like real mid-training data, the transcripts can be of mixed quality: with `careless > 0` a share
of train tasks also gets a *careless* transcript, in which the expert edits without reading the
module, guessing the buggy line (its argument names and wrong operator) from the instruction, and
finishes. Such a guess is right about one time in sixteen (the task is solved); about one time in
twenty-four it is the other function's line (the edit applies and breaks that function);
otherwise the edit fails with the harness's "old text not found" error. A model bootstrapped on
both habits starts some episodes each way, and only reward can tell it that reading first pays:
that is the part of the quickstart's gain RL earns on every seed (docs/results.md).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Sequence
from pathlib import Path

from inhabit.harness.config import HarnessConfig
from inhabit.harness.replay import ReplayPolicy
from inhabit.harness.rollout import run_rollout
from inhabit.sandbox.base import SandboxProvider
from inhabit.taskgen.families.quickstart import ARGS, OPS, Fn, QuickTask
from inhabit.tasks.task import load_task
from inhabit.types import Trajectory

Actions = list[list[tuple[str, dict[str, str]]]]


def expert_actions(t: QuickTask) -> Actions:
    f = t.buggy
    return [
        [("read_file", {"path": f"{t.module}.py"})],
        [
            ("edit_file", {"path": f"{t.module}.py", "old": f.line(t.wrong_op), "new": f.line()}),
            ("finish", {"message": "Fixed the bug."}),
        ],
    ]


def careless_actions(t: QuickTask, rng: random.Random) -> Actions:
    """Edit without reading: argument names and the wrong operator are guesses."""
    f = t.buggy
    guess = Fn(f.name, f.op, rng.choice(ARGS))
    wrong = rng.choice([o for o in OPS if o != f.op])
    return [
        [
            ("edit_file", {"path": f"{t.module}.py", "old": guess.line(wrong), "new": guess.line()}),
            ("finish", {"message": "Fixed the bug."}),
        ],
    ]


def expert_plans(tasks: Sequence[QuickTask], careless: float, seed: int) -> list[tuple[int, Actions]]:
    """(task index, actions): one careful plan per task, plus careless ones for a `careless` share."""
    if not 0.0 <= careless <= 1.0:
        raise ValueError(f"careless must be in [0, 1], got {careless}")
    rng = random.Random(seed)
    plans: list[tuple[int, Actions]] = [(i, expert_actions(t)) for i, t in enumerate(tasks)]
    picked = rng.sample(range(len(tasks)), round(careless * len(tasks)))
    plans += [(i, careless_actions(tasks[i], rng)) for i in sorted(picked)]
    return plans


async def expert_transcripts(
    tasks: Sequence[tuple[QuickTask, Path]],
    provider: SandboxProvider,
    harness: HarnessConfig,
    *,
    concurrency: int = 4,
    grade: bool = False,
    careless: float = 0.0,
    seed: int = 0,
) -> list[Trajectory]:
    """Run the expert on every (task, task_dir); transcripts of episodes that did not finish are
    left out (with `grade`, also those that did not earn reward 1: careless ones mostly)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(index: int, actions: Actions) -> Trajectory:
        async with sem:
            return await run_rollout(
                load_task(tasks[index][1]),
                ReplayPolicy(actions),
                provider,
                config=harness,
                grade_episode=grade,
            )

    plans = expert_plans([qt for qt, _ in tasks], careless, seed)
    out = await asyncio.gather(*(one(i, actions) for i, actions in plans))
    return [t for t in out if t.status == "finished" and (not grade or t.reward == 1.0)]
