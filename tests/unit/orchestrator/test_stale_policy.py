"""What the staleness bound costs a slow rollout (`stale_policy`): the bound per token, partial
rollouts paused and resumed on current weights, and no group generated twice for one slow member."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import looptime
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from inhabit.contracts import Group, Message, Policy, PolicyTurn
from inhabit.orchestrator.buffer import GroupBuffer
from inhabit.orchestrator.partial import PartialPolicy, VersionGate
from inhabit.orchestrator.pipeline import stale_completion_tokens
from inhabit.orchestrator.scale.config import ScaleConfig
from inhabit.orchestrator.scale.simulate import simulate
from inhabit.trainer.samples import Sample, bound_tokens, group_samples, split_stale
from inhabit.types import Segment, Trajectory, TurnRecord


def traj(turn_versions: list[list[int]], reward: float, prompt_len: int = 3) -> Trajectory:
    """A rollout whose turns extend each other (one sample), each turn's tokens of `versions`."""
    turns, context = [], list(range(100, 100 + prompt_len))
    for i, versions in enumerate(turn_versions):
        completion = [10 + i] * len(versions)
        turns.append(
            TurnRecord(
                text="x",
                prompt_token_ids=list(context),
                completion_token_ids=completion,
                logprobs=[-0.5] * len(versions),
                versions=versions,
                completion_tokens=len(versions),
            )
        )
        context += [*completion, 7]  # the observation's token
    return Trajectory(
        task_id="t",
        instruction="i",
        status="finished",
        reward=reward,
        segments=[Segment(index=0, messages=[], turns=turns)],
    )


# ------------------------------------------------------------------ the per-token bound
def test_tokens_older_than_the_bound_leave_the_loss_and_stay_as_context():
    slow = traj([[0, 0], [2, 3], [4]], reward=1.0)  # started at version 0, went on with 2..4
    fast = traj([[4, 4]], reward=0.0)
    samples = group_samples([slow, fast], group_id="t#0")
    kept, masked = bound_tokens(samples, version=5, max_staleness=2)  # floor: version 3
    assert masked == 3, "the two tokens of version 0 and the one of version 2"
    assert len(kept) == 2
    by_reward = {s.reward: s for s in kept}
    s = by_reward[1.0]
    assert s.versions[s.loss_mask].tolist() == [3, 4]
    # the masked tokens are still in the sequence: the later ones are scored on the same prefix
    assert torch.equal(s.input_ids, next(x for x in samples if x.reward == 1.0).input_ids)
    assert s.min_version == 3 and s.meta["stale_tokens_masked"] == 3
    assert split_stale(kept, 5, 2)[1] == [], "what is kept passes the trainer's own re-check"


def test_a_sample_left_without_a_fresh_token_is_not_trained():
    samples = group_samples([traj([[0, 1]], 1.0), traj([[3]], 0.0)], group_id="t#0")
    kept, masked = bound_tokens(samples, version=4, max_staleness=2)
    assert masked == 2 and [s.reward for s in kept] == [0.0]


def _sample(versions: list[int], mask: list[bool]) -> Sample:
    n = len(versions)
    return Sample(
        input_ids=torch.arange(n),
        loss_mask=torch.tensor(mask),
        behaviour_logprobs=torch.zeros(n),
        versions=torch.tensor(versions),
        advantage=1.0,
    )


@settings(max_examples=200, deadline=None)
@given(
    data=st.lists(st.tuples(st.integers(-1, 12), st.booleans()), min_size=1, max_size=30),
    version=st.integers(0, 14),
    bound=st.integers(0, 4),
)
def test_the_oldest_token_any_kept_sample_trains_on_is_within_the_bound(data, version, bound):
    versions = [v for v, _ in data]
    mask = [m and i > 0 for i, (_, m) in enumerate(data)]
    assume(any(mask))  # group_samples makes no sample without a generated token
    s = _sample(versions, mask)
    kept, masked = bound_tokens([s], version, bound)
    old = sum(1 for v, m in zip(versions, mask, strict=True) if m and 0 <= v < version - bound)
    assert masked == old
    for k in kept:
        trained = k.versions[k.loss_mask]
        assert bool(k.loss_mask.any())
        assert all(v < 0 or version - v <= bound for v in trained.tolist())
        # nothing but the stale tokens left the loss
        assert int(k.loss_mask.sum()) == sum(mask) - old
    assert len(kept) == (sum(mask) - old > 0)


def test_stale_engine_tokens_count_what_the_bound_took_from_trainable_rollouts():
    g = Group("t", 0, [traj([[0, 0], [3, 4]], 1.0), traj([[1]], 0.0)], start_version=0)
    failed = traj([[0, 0, 0]], 1.0).model_copy(update={"status": "sandbox_error"})
    g2 = Group("u", 1, [failed], start_version=0)
    # two of version 0, one of version 1; the second rollout has no token left at or after 2
    assert stale_completion_tokens([g, g2], floor=2) == (3, 1)
    # a policy reporting one version for a turn of many tokens counts the turn in proportion
    coarse = traj([[0]], 1.0)
    turn = coarse.segments[0].turns[0].model_copy(update={"completion_tokens": 40})
    coarse = coarse.model_copy(update={"segments": [Segment(index=0, messages=[], turns=[turn])]})
    assert stale_completion_tokens([Group("v", 2, [coarse], start_version=0)], floor=1) == (40, 1)


def test_without_dropping_the_buffer_keeps_old_groups_and_requeues_nothing():
    buf = GroupBuffer(max_staleness=1, tasks_per_step=2, drop_stale=False)
    for i, v in enumerate([0, 1, 2]):
        buf.started()
        buf.put(Group(f"t{i}", i, [traj([[v]], 1.0)], start_version=v, task=f"task{i}"))
    assert [g.task_id for g in buf.take(2, trainer_version=3)] == ["t0", "t1"], "oldest first, kept"
    assert buf.dropped_stale == 0 and buf.pop_requeued() is None
    drop = GroupBuffer(max_staleness=1, tasks_per_step=2)
    for i, v in enumerate([0, 1, 2]):
        drop.started()
        drop.put(Group(f"t{i}", i, [traj([[v, v]], 1.0)], start_version=v, task=f"task{i}"))
    assert [g.task_id for g in drop.take(2, trainer_version=3)] == ["t2"]
    assert drop.dropped_stale == 2 and drop.dropped_tokens == 4 and drop.pop_requeued() == "task0"


# ------------------------------------------------------------------ partial rollouts
class VersionedEngine:
    """An engine's version as the gate reads it, moved by `swap` (what a weight sync does)."""

    def __init__(self) -> None:
        self.version = 0

    def swap(self, version: int) -> None:
        self.version = version


class EchoPolicy(Policy):
    """Turns of two tokens stamped with the engine's version at the time of the request."""

    def __init__(self, engine: VersionedEngine) -> None:
        self.engine = engine
        self.seen: list[int] = []

    async def next_turn(
        self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()
    ) -> PolicyTurn:
        self.seen.append(self.engine.version)
        return PolicyTurn(
            text=f"turn {len(self.seen)}",
            completion_token_ids=[1, 2],
            logprobs=[-0.1, -0.2],
            versions=[self.engine.version] * 2,
        )

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return len(messages)


def test_a_partial_rollout_pauses_at_its_age_and_resumes_on_current_weights():
    async def go() -> None:
        loop = asyncio.get_running_loop()
        engine, gate = VersionedEngine(), VersionGate(0)
        inner = EchoPolicy(engine)
        policy = PartialPolicy(inner, engine, gate, age=2)
        turns = [await policy.next_turn([], max_tokens=8)]  # version 0
        await gate.advance(1)  # published, and this engine got it at once
        engine.swap(1)
        turns.append(await policy.next_turn([], max_tokens=8))  # age 1 < 2: no pause
        assert policy.pauses == 0
        await gate.advance(2)  # published; this engine is still on version 1

        async def sync_later() -> None:
            await asyncio.sleep(5.0)
            engine.swap(2)
            await gate.advance(2)

        syncing = asyncio.create_task(sync_later())
        t0 = loop.time()
        turns.append(await policy.next_turn([], max_tokens=8))  # age 2: paused until version 2
        await syncing
        assert policy.pauses == 1 and gate.pauses == 1
        assert loop.time() - t0 >= 5.0 and policy.paused_s >= 5.0
        assert inner.seen == [0, 1, 2], "resumed on the current weights, not before"
        # the prefix is kept: every turn is the policy's own, with the versions it was sampled at
        assert [t.versions for t in turns] == [[0, 0], [1, 1], [2, 2]]
        # the age counts again from the resume: the next turn does not pause
        turns.append(await policy.next_turn([], max_tokens=8))
        assert policy.pauses == 1

    loop = looptime.new_event_loop(start=0.0, noop_cycles=0)
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()


def test_a_paused_rollout_notices_an_engine_that_caught_up_without_a_publish():
    async def go() -> None:
        engine, gate = VersionedEngine(), VersionGate(0)
        policy = PartialPolicy(EchoPolicy(engine), engine, gate, age=1)
        await policy.next_turn([], max_tokens=8)
        await gate.advance(3)
        loop = asyncio.get_running_loop()
        loop.call_later(2.5, engine.swap, 3)  # a restarted engine comes back on the newest weights
        await policy.next_turn([], max_tokens=8)
        assert policy.pauses == 1 and engine.version == 3

    loop = looptime.new_event_loop(start=0.0, noop_cycles=0)
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()


# ------------------------------------------------------------------ the pipeline on simulated parts
SLOW_MEMBERS = {
    "engines": 4,
    "sandboxes": 48,
    "group_size": 4,
    "tasks": 50,
    "max_staleness": 1,
    "measure_steps": 6,
    "engine": {"step_s": 0.02, "per_seq_s": 0.002},
    "episode": {
        "turns": {"kind": "lognormal", "median": 3, "sigma": 0.3},
        "exec_s": {"kind": "lognormal", "median": 0.5, "sigma": 1.0},
        # a heavy tail: now and then one member of a group grades for minutes
        "grade_s": {"kind": "pareto", "scale": 5, "alpha": 1.2, "cap": 300},
    },
    "trainer": {"step_s": 1.0, "per_token_s": 1e-4},
}


def test_no_group_is_generated_again_for_one_slow_member():
    drop = simulate(ScaleConfig.model_validate({**SLOW_MEMBERS, "stale_policy": "drop"}))
    assert drop["dropped_stale_groups"] > 0, "the scenario has slow members (else it tests nothing)"
    for policy in ("inflight", "partial"):
        r = simulate(ScaleConfig.model_validate({**SLOW_MEMBERS, "stale_policy": policy}))
        assert r["dropped_stale_groups"] == 0 and r["groups_regenerated"] == 0
        assert r["rollouts"] > 0 and r["wasted_share"] > 0, "slow members cost their stale tokens"
        # the bound still holds for every token trained
        assert all(int(k) <= SLOW_MEMBERS["max_staleness"] for k in r["staleness"])
    assert drop["groups_regenerated"] > 0


def test_a_rollout_whose_engine_died_goes_on_elsewhere_under_partial():
    """Engines crash often here: "inflight" runs a rollout that lost its engine again from the
    start; "partial" moves it to another engine with its prefix, so none runs again for that."""
    crashing = {**SLOW_MEMBERS, "measure": "whole", "faults": {"engine_crashes_per_engine_hour": 60.0}}
    inflight = simulate(ScaleConfig.model_validate({**crashing, "stale_policy": "inflight"}))
    partial = simulate(ScaleConfig.model_validate({**crashing, "stale_policy": "partial"}))
    assert inflight["engine_crashes"] > 0 and partial["engine_crashes"] > 0
    assert inflight["retried"] > 0 and inflight["resumed"] == 0
    assert partial["resumed"] > 0 and partial["retried"] == 0
    assert partial["rollouts"] > 0 and partial["groups_regenerated"] == 0


def test_a_simulated_turn_reports_the_versions_its_tokens_were_decoded_on():
    """A swap lands between two decode steps of a request in flight: the turn's first tokens carry
    the old version and the rest the new one, as a real engine's per-token versions do."""
    from inhabit.orchestrator.scale.config import ClusterModel, EngineModel
    from inhabit.orchestrator.scale.parts import ClusterLink, SimEngine, SimRequest

    async def go() -> None:
        model = EngineModel.model_validate({"step_s": 0.1, "per_seq_s": 0.0, "swap_pause_s": 0.5})
        engine = SimEngine(0, model, ClusterLink(0, ClusterModel()), slow=1.0, delta_bytes=1.0)
        request = asyncio.create_task(engine.generate([SimRequest(prompt_tokens=1, tokens=100)]))
        await asyncio.sleep(3.0)  # ~30 of the 100 tokens decoded on version 0
        await engine.sync("sim://store", 1)
        (c,) = await request
        assert c.tokens == 100 and c.versions == (0, 1)
        assert c.token_versions == sorted(c.token_versions) and set(c.token_versions) == {0, 1}
        assert 0.2 <= c.token_versions.count(0) / len(c.token_versions) <= 0.4
        # a request decoded without a swap: every token on the version it started on
        (c2,) = await engine.generate([SimRequest(prompt_tokens=1, tokens=10)])
        assert set(c2.token_versions) == {1}

    loop = looptime.new_event_loop(start=0.0, noop_cycles=0)
    try:
        loop.run_until_complete(go())
    finally:
        loop.close()
