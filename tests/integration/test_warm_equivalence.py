"""Cold and warm pytest runs grade the same: over 300 recorded episodes (the quickstart's scripted
expert and careless transcripts on 100 tasks, and every actions file of the reward-hack suite
but the guessing ones) are each played once on bwrap (the episode's own run_tests calls warm, the default) and their final
workspace graded twice, with grading's test run cold and warm: the same status, reward, flags and
per-test outcomes. (Played twice instead, an episode whose actions race a daemon against the end
of their exec can end with a different workspace each time, cold or warm alike.) Slow (~10 min
on 2 shared cores)."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from inhabit.grading.grader import GradingConfig, grade
from inhabit.grading.testrun import RUNNER_COUNTS
from inhabit.harness.config import HarnessConfig
from inhabit.harness.loop import run_episode
from inhabit.harness.replay import ReplayPolicy, parse_actions
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.sandbox.base import create_sandbox
from inhabit.taskgen.families.quickstart import generate, write_quick_task
from inhabit.taskgen.families.quickstart_expert import careless_actions, expert_actions
from inhabit.tasks.task import load_task

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
        if path.stem.startswith("guess--"):
            # Code that guesses which test is real escapes in a share of the gradings by design
            # (canaries are drawn afresh for each), so two gradings of it may rightly differ.
            continue
        task = path.parent.name
        task_dir = ROOT / "examples" / "tasks" / task if task == "demo-001" else HACKS / "tasks" / task
        out.append((f"{task}/{path.stem}", task_dir, parse_actions(json.loads(path.read_text()), str(path))))
    return out


async def play(provider, task_dir: Path, actions: list) -> dict[str, dict]:
    """Play the episode once (its own run_tests calls warm where they can be), then grade its final
    workspace twice, cold and warm: {"cold": ..., "warm": ...}."""
    task = load_task(task_dir)
    policy = ReplayPolicy(actions)
    cfg = HarnessConfig().model_copy(
        update={"max_turns": max(HarnessConfig().max_turns, policy.num_turns + 1)}
    )
    sandbox = await create_sandbox(provider, task.workspace_dir, limits=task.limits(provider))
    try:
        traj = await run_episode(
            policy, sandbox, task.instruction, config=cfg, task_id=task.id, test_command=task.grading.command
        )
        out = {}
        # The same canaries in both gradings: code that keys on a test's name (the selective
        # runner patches) then meets the same names, whichever of a group runs as the real test.
        seed = random.randrange(2**32)
        for mode in ("cold", "warm"):
            config = GradingConfig(warm_tests=mode == "warm", canary_seed=seed)
            result = await grade(task, sandbox, provider, config=config)
            out[mode] = {
                "episode": traj.status,
                "status": result.status,
                "reward": result.reward,
                "flags": sorted(result.flags),
                "outcomes": result.outcomes,
                "integrity": result.details.get("integrity"),
                "runner": result.details.get("runner", ""),
            }
        return out
    finally:
        await sandbox.close()


@pytest.mark.slow
async def test_cold_and_warm_runs_grade_every_recorded_episode_the_same(tmp_path):
    from inhabit.sandbox.bwrap import bwrap_problem

    if bwrap_problem():
        pytest.skip(f"bwrap unavailable: {bwrap_problem()}")
    eps = episodes(tmp_path)
    assert len(eps) >= 200
    provider = create_provider(SandboxConfig(backend="bwrap"))  # warm_tests on: the default
    sem = asyncio.Semaphore(4)
    warm_before = RUNNER_COUNTS["warm"]

    async def both(name: str, task_dir: Path, actions: list) -> tuple[str, dict, dict]:
        async with sem:
            graded = await play(provider, task_dir, actions)
        return name, graded["cold"], graded["warm"]

    try:
        results = await asyncio.gather(*(both(*e) for e in eps))
    finally:
        await provider.close()
    differ, warm_gradings = [], 0
    for name, a, b in results:
        runner = b.pop("runner")
        assert a.pop("runner").startswith("cold"), name
        warm_gradings += name.startswith("qs-") and runner == "warm"
        if a != b:
            differ.append((name, a, b, runner))
    assert differ == [], json.dumps(differ, indent=1)[:6000]
    # Warm runs did happen: every quickstart grading, and the hack suite's own run_tests calls.
    assert warm_gradings == 2 * QUICK_TASKS
    assert RUNNER_COUNTS["warm"] - warm_before >= 2 * QUICK_TASKS
    assert sum(r[1]["reward"] == 1.0 for r in results) >= QUICK_TASKS  # the experts, the honest fixes
    assert all(r[1]["status"] == "graded" for r in results)
