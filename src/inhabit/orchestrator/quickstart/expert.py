"""The scripted expert: plays a quickstart task through the real harness, sandbox and tools.

Its episode is short on purpose (what a small model can learn to imitate): read the module, then
in one reply replace the buggy `return` line with `edit_file` and call `finish`. The transcripts
(`Trajectory` records, the same the RL rollouts write) are the bootstrap's training data, so the
model learns the tool grammar, the observation format and the code pattern from the very texts
the harness renders.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path

from inhabit.harness.config import HarnessConfig
from inhabit.harness.replay import ReplayPolicy
from inhabit.harness.rollout import run_rollout
from inhabit.orchestrator.quickstart.tasks import QuickTask
from inhabit.sandbox.base import SandboxProvider
from inhabit.tasks.task import load_task
from inhabit.types import Trajectory


def expert_actions(t: QuickTask) -> list[list[tuple[str, dict[str, str]]]]:
    f = t.buggy
    return [
        [("read_file", {"path": f"{t.module}.py"})],
        [
            ("edit_file", {"path": f"{t.module}.py", "old": f.line(t.wrong_op), "new": f.line()}),
            ("finish", {"message": "Fixed the bug."}),
        ],
    ]


async def expert_transcripts(
    tasks: Sequence[tuple[QuickTask, Path]],
    provider: SandboxProvider,
    harness: HarnessConfig,
    *,
    concurrency: int = 4,
    grade: bool = False,
) -> list[Trajectory]:
    """Run the expert on every (task, task_dir); transcripts of failed episodes are left out."""
    sem = asyncio.Semaphore(concurrency)

    async def one(qt: QuickTask, path: Path) -> Trajectory:
        async with sem:
            return await run_rollout(
                load_task(path),
                ReplayPolicy(expert_actions(qt)),
                provider,
                config=harness,
                grade_episode=grade,
            )

    out = await asyncio.gather(*(one(qt, p) for qt, p in tasks))
    return [t for t in out if t.status == "finished" and (not grade or t.reward == 1.0)]
