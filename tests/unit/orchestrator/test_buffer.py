"""The hard staleness bound of GroupBuffer, under any interleaving of generation and training."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from inhabit.contracts import Group, trajectory_min_version
from inhabit.orchestrator.buffer import GroupBuffer
from inhabit.types import Segment, Trajectory, TurnRecord


def traj(versions: list[int]) -> Trajectory:
    turn = TurnRecord(
        text="x", completion_token_ids=[1] * len(versions), logprobs=[0.0] * len(versions), versions=versions
    )
    return Trajectory(
        task_id="t",
        instruction="i",
        status="finished",
        reward=1.0,
        segments=[Segment(index=0, messages=[], turns=[turn])],
    )


def test_min_version_is_the_oldest_token():
    assert trajectory_min_version(traj([3, 3, 4])) == 3
    assert trajectory_min_version(Trajectory(task_id="t", instruction="i", status="error")) == -1
    g = Group(task_id="t", index=0, trajectories=[traj([5, 6]), traj([4, 7])], start_version=4)
    assert g.min_version == 4


def test_take_drops_groups_past_the_bound_and_requeues_their_tasks():
    buf = GroupBuffer(max_staleness=1, tasks_per_step=2)
    for i, v in enumerate([0, 1, 2]):
        buf.started()
        buf.put(Group(task_id=f"t{i}", index=i, trajectories=[traj([v])], start_version=v, task=f"task{i}"))
    got = buf.take(2, trainer_version=2)
    assert [g.task_id for g in got] == ["t1", "t2"]
    assert buf.dropped_stale == 1 and buf.pop_requeued() == "task0" and buf.pop_requeued() is None


def test_take_hands_out_the_oldest_policy_first():
    buf = GroupBuffer(max_staleness=3, tasks_per_step=2)
    for i, v in enumerate([2, 1, 2, 1]):  # completion order
        buf.started()
        buf.put(Group(task_id=f"t{i}", index=i, trajectories=[traj([v])], start_version=v))
    assert [g.task_id for g in buf.take(3, trainer_version=2)] == ["t1", "t3", "t0"]
    assert [g.task_id for g in buf.take(2, trainer_version=2)] == ["t2"]


def test_groups_the_trainer_holds_count_until_its_step_is_done():
    buf = GroupBuffer(max_staleness=1, tasks_per_step=2)
    for i in range(4):
        buf.started()
        buf.put(Group(task_id=f"t{i}", index=i, trajectories=[traj([0])], start_version=0))
    buf.take(2, trainer_version=0)
    # trained at version 1 at the earliest after the two buffered ones: version 2, too old
    assert buf.room() == 0, "a group started on version 0 now would miss the bound"
    buf.step_done()
    assert buf.room() == 2


def test_may_start_bounds_outstanding_groups():
    buf = GroupBuffer(max_staleness=2, tasks_per_step=3)
    n = 0
    while buf.may_start():
        buf.started()
        n += 1
    assert n == 9


def test_a_wave_starts_a_steps_worth_once_none_is_in_flight():
    buf = GroupBuffer(max_staleness=2, tasks_per_step=3)
    assert buf.room() == 9 and buf.wave_room() == 3
    buf.started()
    assert buf.wave_room() == 0, "a group in flight: the next wave waits for it"
    buf.put(Group(task_id="t", index=0, trajectories=[traj([0])], start_version=0))
    for _ in range(7):
        buf.started()
        buf.put(Group(task_id="t", index=0, trajectories=[traj([0])], start_version=0))
    assert buf.room() == 1 and buf.wave_room() == 1, "the bound still caps a wave"
    buf.take(3, trainer_version=0)
    assert buf.wave_room() == 1, "the step being trained still holds its three"
    buf.step_done()
    assert buf.wave_room() == 3


# An interleaving: each action is one of
#   ("start", lag, spread)  the producer starts a group on an engine `lag` versions behind the
#                           trainer (weights not yet swapped in); its tokens span `spread` versions
#   ("finish", k)           the k-th in-flight group completes (any order)
#   ("train", n)            the trainer takes up to n groups and steps (version + 1)
actions = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 3), st.integers(0, 3), st.booleans()),
        st.tuples(st.just("finish"), st.integers(0, 50)),
        st.tuples(st.just("train"), st.integers(1, 4)),
    ),
    max_size=120,
)


@settings(max_examples=150, deadline=None)
@given(max_staleness=st.integers(0, 3), tps=st.integers(1, 4), schedule=actions)
def test_no_group_older_than_the_bound_ever_reaches_the_trainer(max_staleness, tps, schedule):
    buf = GroupBuffer(max_staleness=max_staleness, tasks_per_step=tps)
    version = 0
    in_flight: list[Group] = []
    started = taken = 0
    for action in schedule:
        if action[0] == "start":
            _, lag, spread, obey_gate = action
            if obey_gate and not buf.may_start():
                continue  # a well-behaved producer waits; a rogue one starts anyway
            v0 = max(0, version - lag)
            buf.started()
            started += 1
            versions = list(range(v0, v0 + spread + 1))  # weights swapped in during the episode
            in_flight.append(
                Group(task_id="t", index=started, trajectories=[traj(versions)], start_version=v0)
            )
        elif action[0] == "finish" and in_flight:
            buf.put(in_flight.pop(action[1] % len(in_flight)))
        elif action[0] == "train":
            got = buf.take(action[1], version)
            for g in got:
                assert version - g.min_version <= max_staleness
            taken += len(got)
            if got:
                version += 1
            buf.step_done()
    # every started group is accounted for: trained, dropped, buffered or still running
    assert started == taken + buf.dropped_stale + len(buf) + len(in_flight)
    assert buf.in_flight == len(in_flight)


@settings(max_examples=200, deadline=None)
@given(
    max_staleness=st.integers(0, 3),
    tps=st.integers(1, 4),
    schedule=st.lists(st.sampled_from(["start", "finish", "take", "step"]), max_size=200),
)
def test_a_producer_that_obeys_the_gate_loses_no_group_to_the_bound(max_staleness, tps, schedule):
    """Groups that start on the trainer's newest weights and complete in the order they started
    are never dropped, whenever the producer starts them: while the trainer waits, assembles a
    step or trains one (the engine still holds the version being trained)."""
    buf = GroupBuffer(max_staleness=max_staleness, tasks_per_step=tps)
    version, holding, index = 0, 0, 0
    in_flight: list[Group] = []
    for action in schedule:
        if action == "start" and buf.may_start():
            buf.started()
            index += 1
            in_flight.append(
                Group(task_id="t", index=index, trajectories=[traj([version])], start_version=version)
            )
        elif action == "finish" and in_flight:
            buf.put(in_flight.pop(0))
        elif action == "take" and holding < tps:
            holding += len(buf.take(tps - holding, version))
        elif action == "step" and holding == tps:
            version += 1
            holding = 0
            buf.step_done()
    assert buf.dropped_stale == 0
