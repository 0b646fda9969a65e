"""One rollout of a task: sandbox from the task's workspace, the episode, grading, the record.

This is what both `inhabit replay` and the orchestrator call. Grading runs on the final sandbox
before it closes (`inhabit.grading.grader.grade` copies it into a fresh sandbox); a group's
rollouts share a `GradeCache`, so that a final workspace already graded in the group is not graded
again. With a
`composer` (`inhabit.rewards.compose.RewardComposer`, a run's `[reward]` table) the reward is the
composed one (tests, lint delta, diff size, judges) and every part is recorded in `reward_parts`;
a rollout with a fatal hack flag, or with any flag and a failing test (a cheat that grading
reverted), earns 0 whatever its other parts say. Every failure
(no sandbox, a policy that dies, grading that cannot run) lands on the returned trajectory as a
status and an error: a failed rollout is data, never an exception.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from inhabit.contracts import Policy
from inhabit.harness.config import HarnessConfig
from inhabit.harness.loop import EpisodeObserver, run_episode
from inhabit.log import get_logger
from inhabit.sandbox.base import Sandbox, SandboxProvider
from inhabit.tasks.task import Task
from inhabit.types import Trajectory

if TYPE_CHECKING:
    from inhabit.grading.gradecache import GradeCache
    from inhabit.grading.grader import GradeResult, GradingConfig
    from inhabit.rewards.compose import RewardComposer

log = get_logger(__name__)


async def run_rollout(
    task: Task,
    policy: Policy,
    provider: SandboxProvider,
    *,
    config: HarnessConfig | None = None,
    grading_config: GradingConfig | None = None,
    observer: EpisodeObserver | None = None,
    grade_episode: bool = True,
    composer: RewardComposer | None = None,
    grade_cache: GradeCache | None = None,
) -> Trajectory:
    """Run `policy` on `task` and grade the result; with `grade_cache` (one per group), a final
    workspace already graded is not graded again."""
    from inhabit.grading.grader import grade

    cfg = config or HarnessConfig()
    t0 = time.monotonic()
    test_command = task.grading.command if task.grading is not None else None
    try:
        from inhabit.envs.task_env import task_environment
        from inhabit.sandbox.base import create_sandbox

        # The task's environment (built on first use) is the agent's `python` as it is grading's.
        env = await task_environment(task)
        sandbox = await create_sandbox(
            provider, task.workspace_dir, limits=task.limits(provider), env=env.path if env else None
        )
    except Exception as e:
        log.warning("task %s: no sandbox: %s", task.id, e)
        return Trajectory(
            task_id=task.id,
            instruction=task.instruction,
            status="sandbox_error",
            error=f"{type(e).__name__}: {e}",
            policy=type(policy).__name__,
            timings={"rollout_s": round(time.monotonic() - t0, 6)},
        )
    try:
        traj = await run_episode(
            policy,
            sandbox,
            task.instruction,
            config=cfg,
            task_id=task.id,
            test_command=test_command,
            observer=observer,
        )
        update: dict[str, Any] = {}
        if grade_episode and task.grading is not None and traj.status != "sandbox_error":
            g0 = time.monotonic()
            cached = False
            try:
                if grade_cache is not None:
                    result, cached = await grade_cache.grade(task, sandbox, provider, config=grading_config)
                else:
                    result = await grade(task, sandbox, provider, config=grading_config)
            except Exception as e:
                update = {"status": "grading_error", "error": f"{type(e).__name__}: {e}", "reward": 0.0}
            else:
                update = {
                    "reward": float(result.reward),
                    "reward_parts": {"tests": float(result.reward)},
                    "flags": list(result.flags),
                    "grading": {"status": result.status, "outcomes": dict(result.outcomes), **result.details},
                }
                if cached:  # the same final files were graded for an earlier rollout
                    update["grading"]["cached"] = True
                if result.status == "error":
                    update |= {"status": "grading_error", "error": str(result.details.get("error", ""))}
                elif composer is not None:
                    update |= await _composed(composer, task, sandbox, traj, result)
            update["timings"] = {**traj.timings, "grading_s": round(time.monotonic() - g0, 6)}
        traj = traj.model_copy(update=update)
    finally:
        await sandbox.close()
    return traj.model_copy(update={"timings": {**traj.timings, "rollout_s": round(time.monotonic() - t0, 6)}})


async def _composed(
    composer: RewardComposer, task: Task, sandbox: Sandbox, traj: Trajectory, result: GradeResult
) -> dict[str, Any]:
    """The composed reward and its parts. A fatal hack flag zeroes the whole reward: the other
    parts (lint, diff, judges) must never pay for a run that cheated the tests."""
    from inhabit.rewards.compose import workspace_changes

    changes = await workspace_changes(task.workspace_dir, sandbox)
    message = next((t.text for s in reversed(traj.segments) for t in reversed(s.turns) if t.text), "")
    out = await composer.compose(
        tests=float(result.reward), changes=changes, instruction=task.instruction, message=message
    )
    # A fatal flag, or any flag on a run whose tests did not all pass (a cheat grading reverted):
    # lint, diff and judges must not pay for it.
    cheated = bool(result.details.get("fatal_flags")) or (bool(result.flags) and result.reward < 1.0)
    reward = 0.0 if cheated else float(out.reward)
    parts = {k: float(v) for k, v in out.parts.items() if v is not None}
    return {"reward": reward, "reward_parts": parts}
