"""Held-out evaluation: every held-out task, `samples` rollouts each, with the engine's weights.

Success rate = rollouts graded reward 1 / all rollouts (a failed rollout counts as a failure, so
infrastructure trouble can only lower the number). Sampling uses the rollout temperature, as in
training; the rollouts are written to trajectories.jsonl with purpose "eval:<label>".
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

from inhabit.orchestrator.rollouts import RolloutRunner


async def evaluate(runner: RolloutRunner, tasks: list[Any], samples: int, label: str) -> dict[str, Any]:
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
        "seconds": round(time.monotonic() - t0, 2),
    }
