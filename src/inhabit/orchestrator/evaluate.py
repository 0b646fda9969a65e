"""Held-out evaluation: every held-out task, `samples` rollouts each, with the engine's weights.

Success rate = rollouts graded reward 1 / all rollouts (a failed rollout counts as a failure, so
infrastructure trouble can only lower the number). Sampling uses the rollout temperature, as in
training; the rollouts are written to trajectories.jsonl with purpose "eval:<label>".
`first_tool` breaks the rollouts down by the tool of their first call (e.g. how often the agent
reads before it edits) with each kind's success rate: what a change of habit did to the number.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from inhabit.contracts import RolloutRunner
from inhabit.harness.tools import TOOLS
from inhabit.tasks.task import Task
from inhabit.types import Trajectory


async def evaluate(runner: RolloutRunner, tasks: list[Task], samples: int, label: str) -> dict[str, Any]:
    t0 = time.monotonic()
    groups = await asyncio.gather(
        *(runner.run_group(t, -1 - i, purpose=f"eval:{label}", size=samples) for i, t in enumerate(tasks))
    )
    trajs = [t for g in groups for t in g.trajectories]
    wins = [t.reward is not None and t.reward >= 1.0 for t in trajs]
    per_task = [
        sum(t.reward is not None and t.reward >= 1.0 for t in g.trajectories) / len(g.trajectories)
        for g in groups
    ]
    return {
        "label": label,
        "version": runner.engine.version,
        "tasks": len(tasks),
        "samples_per_task": samples,
        "rollouts": len(trajs),
        "success_rate": sum(wins) / max(1, len(wins)),
        "tasks_solved_any": sum(p > 0 for p in per_task),
        "status": dict(Counter(t.status for t in trajs)),
        "first_tool": first_tool_breakdown(trajs, wins),
        "seconds": round(time.monotonic() - t0, 2),
    }


def first_tool_breakdown(trajs: list[Trajectory], wins: list[bool]) -> dict[str, dict[str, float]]:
    kinds: dict[str, list[bool]] = {}
    for t, won in zip(trajs, wins, strict=True):
        tool = t.tool_calls[0].tool if t.tool_calls else None
        if not t.tool_calls:
            first = "none"
        elif tool is None:  # a call the parser could not name
            first = "malformed"
        else:  # model-written names must not become unbounded keys in eval.json and TensorBoard
            first = tool if tool in TOOLS else "unknown"
        kinds.setdefault(first, []).append(won)
    return {
        k: {"rollouts": len(v), "share": len(v) / len(trajs), "success_rate": sum(v) / len(v)}
        for k, v in sorted(kinds.items())
    }
