"""The gate: a candidate runs the held-out offline tasks (`inhabit eval`'s machinery, the harness of
training and use) and is refused when its success rate falls more than `tolerance` below the
deployed version's on the same tasks.

The deployed version's score is measured once and kept on its cycle record; each candidate's
records go to `<workdir>/gate/cycle-N/`, appended as they finish, so a gate cut short by a crash
resumes where it stopped. Both sides run the local policy with the same seed.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from inhabit.online.config import GateConfig


def evaluate(model_dir: Path, records: Path, config: GateConfig) -> dict[str, Any]:
    """Success rate of the model folder on the gate's tasks (resuming `records` if it exists)."""
    from inhabit.evaluation.metrics import summarize
    from inhabit.evaluation.runner import discover_tasks, run_eval
    from inhabit.harness.config import HarnessConfig
    from inhabit.inference.local_policy import LocalPolicy
    from inhabit.sandbox import SandboxConfig, create_provider

    assert config.tasks is not None
    tasks = discover_tasks(config.tasks)

    async def go() -> list[dict[str, Any]]:
        policy = LocalPolicy.from_path(model_dir, seed=0)
        provider = create_provider(SandboxConfig(backend=config.sandbox))
        try:
            return await run_eval(
                tasks,
                policy,
                provider,
                records,
                samples=config.samples,
                concurrency=config.concurrency,
                resume=True,
                harness=HarnessConfig(max_turns=config.max_turns, max_turn_tokens=config.max_turn_tokens),
            )
        finally:
            await provider.close()
            await policy.close()

    summary = summarize(asyncio.run(go()))
    return {"success_rate": summary["success_rate"], "samples": summary["samples"], "tasks": summary["tasks"]}


def decide(candidate: float, deployed: float, tolerance: float) -> bool:
    """Pass unless the candidate is more than `tolerance` below the deployed version."""
    return candidate >= deployed - tolerance - 1e-12
