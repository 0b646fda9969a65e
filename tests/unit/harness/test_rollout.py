"""run_rollout: the shipped harness config parses, and a rollout that cannot start is data."""

from __future__ import annotations

from pathlib import Path

from inhabit.config import load_config
from inhabit.harness.config import HarnessConfig
from inhabit.harness.replay import ReplayPolicy
from inhabit.harness.rollout import run_rollout
from inhabit.tasks.task import load_task

ROOT = Path(__file__).resolve().parents[3]


def test_shipped_harness_config_parses() -> None:
    cfg = load_config(HarnessConfig, ROOT / "configs" / "harness.toml", ["max_turns=7"])
    assert cfg.max_turns == 7 and cfg.max_parallel_calls == 16


async def test_a_rollout_whose_sandbox_cannot_be_created_is_a_failed_record(provider, tmp_path: Path) -> None:
    task_dir = tmp_path / "t"
    (task_dir / "workspace").mkdir(parents=True)
    (task_dir / "task.toml").write_text('id = "gone-1"\ninstruction = "do it"\n')
    task = load_task(task_dir)
    (task_dir / "workspace").rmdir()  # vanishes between loading and the rollout
    traj = await run_rollout(task, ReplayPolicy([]), provider)
    assert traj.status == "sandbox_error" and traj.error and traj.task_id == "gone-1"
    assert traj.reward is None and "rollout_s" in traj.timings


async def test_a_task_without_grading_runs_ungraded(provider, tmp_path: Path) -> None:
    task_dir = tmp_path / "t"
    (task_dir / "workspace").mkdir(parents=True)
    (task_dir / "workspace" / "a.txt").write_text("hello\n")
    (task_dir / "task.toml").write_text('id = "free-1"\ninstruction = "read a.txt"\n')
    policy = ReplayPolicy([[("read_file", {"path": "a.txt"})]])
    traj = await run_rollout(load_task(task_dir), policy, provider)
    assert traj.status == "finished" and traj.reward is None
    assert traj.tool_calls[0].observation == "1\thello"
