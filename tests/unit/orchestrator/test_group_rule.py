"""Failed rollouts never reach training; the group rule decides what happens to their group."""

from __future__ import annotations

from inhabit.contracts import Group
from inhabit.orchestrator.pipeline import TaskStream, rollout_stats, usable_groups
from inhabit.trainer.samples import group_samples
from inhabit.types import MessageRecord, Segment, Trajectory, TurnRecord


def traj(status: str, reward: float | None, version: int = 0) -> Trajectory:
    turn = TurnRecord(
        text="ab",
        prompt_token_ids=[1, 2],
        completion_token_ids=[3, 4],
        logprobs=[-0.5, -0.5],
        versions=[version] * 2,
    )
    seg = Segment(index=0, messages=[MessageRecord(role="user", content="x")], turns=[turn])
    return Trajectory(task_id="t", instruction="i", status=status, reward=reward, segments=[seg])  # type: ignore[arg-type]


def group(*trajs: Trajectory) -> Group:
    return Group(task_id="t", index=0, trajectories=list(trajs), start_version=0)


def test_group_with_two_good_rollouts_trains_on_them_only():
    g = group(
        traj("finished", 1.0), traj("sandbox_error", None), traj("finished", 0.0), traj("policy_error", 0.0)
    )
    ok, bad = usable_groups([g], min_group_size=2)
    assert ok == [g] and bad == []
    samples = group_samples(g.trajectories)
    # advantages among the two kept rollouts only: +0.5 and -0.5; the failed ones give no sample
    assert sorted(s.advantage for s in samples) == [-0.5, 0.5]
    assert {s.source.split("/")[1].split("#")[0] for s in samples} == {"0", "2"}


def test_group_with_fewer_than_min_survivors_is_dropped():
    g = group(traj("finished", 1.0), traj("error", None), traj("grading_error", 0.0))
    ok, bad = usable_groups([g], min_group_size=2)
    assert ok == [] and bad == [g]
    ok, bad = usable_groups([g], min_group_size=1)
    assert ok == [g]


def test_rollout_stats_count_failures_and_success():
    trajs = [
        traj("finished", 1.0),
        traj("finished", 0.0),
        traj("sandbox_error", None),
        traj("turn_limit", 0.0),
    ]
    s = rollout_stats(trajs)
    assert s["failed"] == 1 and s["status"]["sandbox_error"] == 1
    assert abs(s["success_rate"] - 1 / 3) < 1e-9 and abs(s["reward"]["mean"] - 1 / 3) < 1e-9
    assert s["reward"]["hist"] == {"0.0": 2, "1.0": 1}


def test_task_stream_covers_every_task_each_epoch_and_resumes():
    tasks = list(range(7))
    a = TaskStream(tasks, seed=3)
    first = [a.next() for _ in range(14)]
    assert sorted(first[:7]) == tasks and sorted(first[7:]) == tasks
    b = TaskStream(tasks, seed=3, cursor=5)
    assert [b.next() for _ in range(9)] == first[5:]
