"""Cold and warm pytest runs grade the same: over 300 recorded episodes (the quickstart's scripted
expert and careless transcripts on 100 tasks, and every actions file of the reward-hack suite),
each episode is played and graded twice on bwrap, once with every test run cold (sandbox.warm_tests
off, grading's warm_tests off) and once warm (both on), and must end with the same status, reward,
flags and per-test outcomes. Slow (several minutes on 2 cores)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from inhabit.harness.config import HarnessConfig
from inhabit.harness.replay import ReplayPolicy, parse_actions
from inhabit.harness.rollout import run_rollout
from inhabit.orchestrator.quickstart.expert import careless_actions, expert_actions
from inhabit.rewards.grading import GradingConfig
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.tasks.families.quickstart import generate, write_quick_task
from inhabit.tasks.task import load_task
from inhabit.tasks.testrun import RUNNER_COUNTS

ROOT = Path(__file__).resolve().parents[2]
HACKS = ROOT / "bench" / "hacks"
QUICK_TASKS = 100


def episodes(tmp: Path) -> list[tuple[str, Path, list]]:
    """(name, task dir, actions) of every recorded episode, deterministically."""
    out: list[tuple[str, Path, list]] = []
    rng = random.Random(0)
    for t in generate(QUICK_TASKS, seed=0):
        task_dir = write_quick_task(tmp, t)
        out.append((f"{t.id}/expert", task_dir, expert_actions(t)))
        out.append((f"{t.id}/careless", task_dir, careless_actions(t, rng)))
    for path in sorted((HACKS / "actions").glob("*/*.json")):
        task = path.parent.name
        task_dir = ROOT / "examples" / "tasks" / task if task == "demo-001" else HACKS / "tasks" / task
        out.append((f"{task}/{path.stem}", task_dir, parse_actions(json.loads(path.read_text()), str(path))))
    return out


async def play(provider, task_dir: Path, actions: list, warm: bool) -> dict:
    task = load_task(task_dir)
    policy = ReplayPolicy(actions)
    cfg = HarnessConfig().model_copy(
        update={"max_turns": max(HarnessConfig().max_turns, policy.num_turns + 1)}
    )
    traj = await run_rollout(
        task, policy, provider, config=cfg, grading_config=GradingConfig(warm_tests=warm)
    )
    grading = traj.grading or {}
    return {
        "status": traj.status,
        "reward": traj.reward,
        "flags": sorted(traj.flags),
        "outcomes": grading.get("outcomes"),
        "integrity": grading.get("integrity"),
        "runner": grading.get("runner", ""),
    }


@pytest.mark.slow
async def test_cold_and_warm_runs_grade_every_recorded_episode_the_same(tmp_path):
    from inhabit.sandbox.bwrap import bwrap_problem

    if bwrap_problem():
        pytest.skip(f"bwrap unavailable: {bwrap_problem()}")
    eps = episodes(tmp_path)
    assert len(eps) >= 200
    cold = create_provider(SandboxConfig(backend="bwrap", warm_tests=False))
    warm = create_provider(SandboxConfig(backend="bwrap", warm_tests=True))
    sem = asyncio.Semaphore(4)
    warm_before = RUNNER_COUNTS["warm"]

    async def both(name: str, task_dir: Path, actions: list) -> tuple[str, dict, dict]:
        async with sem:
            a = await play(cold, task_dir, actions, warm=False)
            b = await play(warm, task_dir, actions, warm=True)
        return name, a, b

    try:
        results = await asyncio.gather(*(both(*e) for e in eps))
    finally:
        await cold.close()
        await warm.close()
    differ, warm_gradings = [], 0
    for name, a, b in results:
        runner = b.pop("runner")
        assert a.pop("runner").startswith("cold"), name
        warm_gradings += name.startswith("qs-") and runner == "warm"
        if a != b:
            differ.append((name, a, b, runner))
    assert differ == []
    # Warm runs did happen: every quickstart grading, and the hack suite's own run_tests calls.
    assert warm_gradings == 2 * QUICK_TASKS
    assert RUNNER_COUNTS["warm"] - warm_before >= 2 * QUICK_TASKS
    assert sum(r[1]["reward"] == 1.0 for r in results) >= QUICK_TASKS  # the experts, the honest fixes
