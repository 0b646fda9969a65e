"""The RL pipeline: rollout loop + trainer loop around a buffer with a hard staleness bound.

    pipeline = Pipeline(cfg, runner, trainer, sync, train_tasks)   # the parts of a `RunParts`
    await pipeline.run(steps)

Async mode (`mode = "async"`): a producer keeps starting groups (G rollouts of one task, with the
newest weights the engine holds) while `GroupBuffer.may_start` allows and the run can still train
them (no group is started that the run would end before training), one at a time or, with
`rollout.waves`, `tasks_per_step` together once the previous wave has completed (so the engine
decodes their episodes in one batch, as sync's are); the trainer loop takes `tasks_per_step`
completed groups as soon as they are ready, trains one step in a worker thread (the event loop, and thus
every rollout, keeps running), publishes version v+1 through the `WeightSync` and the engine swaps
it in between two decoding steps. Sync mode (`mode = "sync"`) runs the same parts in lock-step:
generate `tasks_per_step` groups with the current weights, then train, then publish.

What the staleness bound costs (`stale_policy`): "drop" drops a group holding any token older than
`max_staleness` versions whole, in the buffer, and generates its task again; "inflight" (default)
trains every group, minus the tokens older than the bound (`bound_tokens`: the bound applies to the
oldest token a sample trains on, truncated importance sampling corrects the rest per token), while
rollouts in progress go on with each version the engine swaps in between decode steps; "partial"
adds a pause between two turns for a rollout `partial_age` versions old, until its engine holds the
newest weights (`inhabit.orchestrator.partial`), and under the Ray placement moves a rollout whose
engine died to another engine with its prefix instead of running it again from the start
(`DispatchRunner.resume_lost`). Under either of the last two no group is generated
twice because one member was slow. Each step's record says what the bound cost: groups dropped and
their tokens (drop), tokens taken out of the loss and the engine tokens they stood for (the others).

The group rule (failed rollouts): rollouts whose status is not finished/turn_limit (sandbox,
engine, grading errors, timeouts) are recorded in trajectories.jsonl and left out of training.
A group trains on the rest when at least `rollout.min_group_size` (default 2) rollouts remain,
with advantages computed among those; otherwise the whole group is dropped (counted as
`groups.too_few`). A step whose groups yield no sample with a non-zero advantage skips the
update (the version does not move) and says so in its metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import random
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from inhabit.contracts import Group, RolloutRunner, TrainerHandle, WeightSync
from inhabit.log import get_logger
from inhabit.orchestrator.buffer import GroupBuffer
from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.partial import PartialPolicy, VersionGate
from inhabit.tasks.task import Task
from inhabit.trainer.samples import (
    bound_tokens,
    count_split_turns,
    count_summary_segment_samples,
    group_samples,
    is_trainable,
)
from inhabit.types import Trajectory

log = get_logger(__name__)

CONTROL_PLANE_GC_THRESHOLD = (50_000, 20, 100)
"""Python's cyclic GC thresholds while a run drives its rollouts (the default is (700, 10, 10))."""


@contextlib.contextmanager
def control_plane_gc() -> Iterator[None]:
    """Keep the cyclic garbage collector off the run's live rollout objects.

    The driver holds every rollout in flight (trajectories, turns, observations) alive for minutes.
    With Python's default thresholds a young-generation collection runs every 700 allocations and
    promotes them, and each older collection scans all of them again, so the control plane's CPU
    per rollout grew with the rollouts in flight (bench/scale.py: 2.50 ms per rollout at 3k
    sandboxes on 8 engines, 1.83 ms with these thresholds). `gc.freeze()` also moves what exists
    when the run starts (models, tokenizers, tasks) out of every later scan. Reference counting
    frees almost everything a run makes; the collector is only for cycles, and with a young
    generation of 50,000 objects they are still collected within a fraction of a second of work.
    The previous thresholds are restored and the frozen objects returned to the collector on exit.
    """
    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(*CONTROL_PLANE_GC_THRESHOLD)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


class TaskStream:
    """Train tasks in a reshuffled order per epoch, from a resumable cursor."""

    def __init__(self, tasks: list[Task], seed: int, cursor: int = 0) -> None:
        self.tasks, self.seed, self.cursor = tasks, seed, cursor
        # The epoch's order, shuffled once per epoch (not per task: that cost O(tasks) per group,
        # ~5 ms a group with 10k tasks, found by bench/scale.py).
        self._order: tuple[int, list[int]] | None = None

    def next(self) -> Task:
        n = len(self.tasks)
        epoch, i = divmod(self.cursor, n)
        if self._order is None or self._order[0] != epoch:
            order = list(range(n))
            random.Random(self.seed * 7_919 + epoch).shuffle(order)
            self._order = (epoch, order)
        self.cursor += 1
        return self.tasks[self._order[1][i]]


def _now() -> float:
    """The event loop's clock: monotonic time in a run, virtual time under `inhabit scale simulate`."""
    return asyncio.get_running_loop().time()


def usable_groups(groups: list[Group], min_group_size: int) -> tuple[list[Group], list[Group]]:
    """(trainable, dropped) by the group rule (module docstring)."""
    ok, bad = [], []
    for g in groups:
        kept = sum(is_trainable(t) for t in g.trajectories)
        (ok if kept >= min_group_size else bad).append(g)
    return ok, bad


def stale_completion_tokens(groups: list[Group], floor: int) -> tuple[float, int]:
    """(engine tokens, rollouts): the tokens of the trainable rollouts that came from a version older
    than `floor` (the generation the per-token bound takes out of the loss), and the rollouts left
    with no token at or after it (thrown away after all). A turn whose `versions` are coarser than
    its tokens (a policy that reports fewer) counts its `completion_tokens` in the same proportion."""
    total, spent = 0.0, 0
    for g in groups:
        for traj in g.trajectories:
            if not is_trainable(traj):
                continue
            fresh = False
            for seg in traj.segments:
                for turn in seg.turns:
                    vs = turn.versions or ()
                    old = sum(1 for v in vs if 0 <= v < floor)
                    fresh = fresh or old < len(vs)
                    if old:
                        total += (turn.completion_tokens or len(vs)) * old / len(vs)
            spent += not fresh
    return total, spent


def rollout_stats(trajs: list[Trajectory]) -> dict[str, Any]:
    """Reward distribution, success, statuses, flags, turns, summaries of some rollouts."""
    rewards = [t.reward for t in trajs if t.reward is not None and is_trainable(t)]
    n = len(rewards)
    mean = sum(rewards) / n if n else 0.0
    var = sum((r - mean) ** 2 for r in rewards) / n if n else 0.0
    hist = Counter(round(r, 2) for r in rewards)
    return {
        "rollouts": len(trajs),
        "reward": {
            "mean": mean,
            "std": var**0.5,
            "min": min(rewards) if rewards else 0.0,
            "max": max(rewards) if rewards else 0.0,
            "hist": {str(k): v for k, v in sorted(hist.items())},
        },
        "success_rate": sum(r >= 1.0 for r in rewards) / n if n else 0.0,
        "status": dict(Counter(t.status for t in trajs)),
        "failed": sum(not is_trainable(t) for t in trajs),
        "hack_flags": dict(Counter(f for t in trajs for f in t.flags)),
        "turns_mean": sum(t.num_turns for t in trajs) / max(1, len(trajs)),
        "summaries_per_episode": sum(len(t.summaries) for t in trajs) / max(1, len(trajs)),
        "completion_tokens": sum(
            tt.completion_tokens or 0 for t in trajs for s in t.segments for tt in s.turns
        ),
        "rollout_s_mean": sum(t.timings.get("rollout_s", 0.0) for t in trajs) / max(1, len(trajs)),
        "reward_parts": _part_means(trajs),
        # Which runner graded them: "warm" or "cold" (see inhabit.sandbox.warm and grading's details);
        # a rollout whose final files were graded before (rollout.grade_cache) ran no grading.
        "grading_runner": dict(
            Counter(
                str(t.grading["runner"]).split(":")[0]
                for t in trajs
                if t.grading.get("runner") and not t.grading.get("cached")
            )
        ),
        "grading_cached": sum(bool(t.grading.get("cached")) for t in trajs),
    }


def _part_means(trajs: list[Trajectory]) -> dict[str, float]:
    """Mean of each reward part over the rollouts that have it (a `[reward]` table's tests, lint,
    diff and judges; `tests` alone without one)."""
    sums: dict[str, list[float]] = {}
    for t in trajs:
        if is_trainable(t):
            for name, value in t.reward_parts.items():
                sums.setdefault(name, []).append(value)
    return {name: sum(v) / len(v) for name, v in sorted(sums.items())}


class Pipeline:
    """Wires runner, buffer, trainer and weight sync (see module docstring)."""

    def __init__(
        self,
        cfg: RunConfig,
        runner: RolloutRunner,
        trainer: TrainerHandle,
        sync: WeightSync,
        train_tasks: list[Task],
        *,
        on_step: Callable[[int, dict[str, Any]], None] | None = None,
        cursor: int = 0,
        groups_started: int = 0,
        should_stop: Callable[[], bool] | None = None,
    ) -> None:
        self.cfg, self.runner, self.trainer, self.sync = cfg, runner, trainer, sync
        self.stream = TaskStream(train_tasks, cfg.seed, cursor)
        self.buffer = GroupBuffer(
            cfg.max_staleness, cfg.rollout.tasks_per_step, drop_stale=cfg.stale_policy == "drop"
        )
        self.gate = VersionGate(trainer.version)
        """The newest published version; what a paused partial rollout waits for its engine to hold."""
        if cfg.stale_policy == "partial" and hasattr(runner, "wrap_policy"):
            age = cfg.partial_age
            runner.wrap_policy = lambda policy, engine: PartialPolicy(policy, engine, self.gate, age=age)
        if cfg.stale_policy == "partial" and hasattr(runner, "resume_lost"):
            runner.resume_lost = True  # an engine lost mid-episode: go on elsewhere, not from scratch
        self.stale_tokens_masked = 0
        """Generated tokens the per-token bound took out of the loss (stale_policy inflight/partial)."""
        self.stale_engine_tokens = 0.0
        """The engine tokens those stood for (`stale_completion_tokens`)."""
        self.stale_rollouts = 0
        """Trained groups' rollouts the per-token bound left without a single token in the loss."""
        self.on_step = on_step or (lambda step, record: None)
        # Checked between steps: a stop request ends `run` after the step in progress (run.py's STOP file).
        self.should_stop = should_stop or (lambda: False)
        self.groups_started = groups_started
        self._failure: Exception | None = None
        """What a group task raised (not a failed rollout: those are data); ends an async run."""
        self.trainer_wait_s = 0.0
        self.trainer_busy_s = 0.0
        self._cond = asyncio.Condition()
        self._t_start = 0.0
        self._last = 0.0
        self._last_tokens = 0
        self._last_engine: tuple[int, int] | None = None
        self._finished0 = 0
        # What `run` may still start: groups for its remaining steps, counted from its start.
        self._groups_budget = 0
        self._groups_started0 = groups_started
        self._dropped0 = 0
        self.history: list[dict[str, Any]] = []

    def data_state(self) -> dict[str, Any]:
        return {"cursor": self.stream.cursor, "groups_started": self.groups_started}

    async def run(self, steps: int) -> list[dict[str, Any]]:
        """Run trainer steps until the trainer has done `steps` in total (or `should_stop()`)."""
        self._t_start = self._last = _now()
        self._groups_budget = max(0, steps - self.trainer.steps) * self.cfg.rollout.tasks_per_step
        self._groups_started0 = self.groups_started
        self._dropped0 = self.buffer.dropped_stale
        self._last_tokens = self.runner.completion_tokens
        self._last_engine = self.runner.engine.decode_counts()
        self._finished0 = self.runner.finished
        with control_plane_gc():
            if self.cfg.mode == "sync":
                await self._run_sync(steps)
            else:
                await self._run_async(steps)
        return self.history

    # ------------------------------------------------------------------ sync
    async def _run_sync(self, steps: int) -> None:
        tps = self.cfg.rollout.tasks_per_step
        while self.trainer.steps < steps and not self.should_stop():
            await self.sync.apply(self.runner.engine)
            await self.gate.advance(self.trainer.version)
            t0 = _now()
            tasks = [self.stream.next() for _ in range(tps)]
            groups = await asyncio.gather(*(self._group(t, self._next_index()) for t in tasks))
            self.trainer_wait_s += _now() - t0
            await self._train(list(groups), dropped_stale=0)

    # ------------------------------------------------------------------ async
    async def _run_async(self, steps: int) -> None:
        producer = asyncio.create_task(self._produce())
        tps = self.cfg.rollout.tasks_per_step
        try:
            while self.trainer.steps < steps and not self.should_stop():
                t0 = _now()
                groups: list[Group] = []
                stale_before = self.buffer.dropped_stale
                while len(groups) < tps:
                    groups += self.buffer.take(tps - len(groups), self.trainer.version)
                    async with self._cond:
                        self._cond.notify_all()  # slots freed (and maybe tasks to requeue)
                        if len(groups) < tps:
                            await self._cond.wait()
                    if producer.done():
                        producer.result()  # surfaces a producer crash (a bug) instead of hanging
                    if self._failure is not None:
                        raise self._failure
                self.trainer_wait_s += _now() - t0
                await self._train(groups, dropped_stale=self.buffer.dropped_stale - stale_before)
                self.buffer.step_done()  # the loop's next `notify_all` lets the producer use the room
        finally:
            producer.cancel()
            await asyncio.gather(producer, return_exceptions=True)

    def _budget_left(self) -> int:
        """How many more groups than those already started the run can still train.

        Near the end of a run the producer would otherwise fill every slot `may_start` allows
        (up to `max_staleness` steps ahead) with groups that the run ends before training: pure
        waste, ~14% of the rollouts of a 12-step run at max_staleness 2. Stale-dropped groups
        are generated again, so they do not count as started.
        """
        dropped = self.buffer.dropped_stale - self._dropped0
        started = self.groups_started - self._groups_started0 - dropped
        return self._groups_budget - started

    def _may_start(self) -> int:
        """How many groups the producer may start now (at most one at a time without waves)."""
        room = self.buffer.wave_room() if self.cfg.rollout.waves else min(1, self.buffer.room())
        return min(room, self._budget_left())

    async def _produce(self) -> None:
        running: set[asyncio.Task] = set()
        try:
            while True:
                async with self._cond:
                    await self._cond.wait_for(lambda: self._may_start() > 0)
                    n = self._may_start()
                await self.sync.apply(self.runner.engine)
                await self.gate.advance(self.trainer.version)
                for _ in range(n):
                    task = self.buffer.pop_requeued() or self.stream.next()
                    self.buffer.started()
                    # The index is taken here, not when the task first runs: the next
                    # `_budget_left` must count this group already.
                    t = asyncio.create_task(self._finish_group(task, self._next_index()))
                    running.add(t)
                    t.add_done_callback(running.discard)
        finally:
            for t in running:
                t.cancel()
            await asyncio.gather(*running, return_exceptions=True)

    async def _finish_group(self, task: Task, index: int) -> None:
        try:
            group = await self._group(task, index)
        except asyncio.CancelledError:
            self.buffer.abandon()
            raise
        except Exception as e:
            # run_group turns failed rollouts into data; what it raises ends the run (a streak of
            # failures, a bug). Hand it to the trainer loop, which would otherwise wait forever.
            self.buffer.abandon()
            async with self._cond:
                self._failure = self._failure or e
                self._cond.notify_all()
            return
        async with self._cond:
            self.buffer.put(group)
            self._cond.notify_all()

    def _next_index(self) -> int:
        self.groups_started += 1
        return self.groups_started - 1

    async def _group(self, task: Task, index: int) -> Group:
        return await self.runner.run_group(task, index)

    # ------------------------------------------------------------------ train
    async def _train(self, groups: list[Group], *, dropped_stale: int) -> None:
        cfg = self.cfg
        version = self.trainer.version
        ok, too_few = usable_groups(groups, cfg.rollout.min_group_size)
        samples = []
        for g in ok:
            samples += group_samples(
                g.trajectories,
                group_id=f"{g.task_id}#{g.index}",
                normalize_std=cfg.trainer.normalize_advantage_std,
                drop_zero_advantage=not cfg.rollout.train_zero_advantage,
            )
        masked = 0
        stale_engine_tokens, stale_rollouts = 0.0, 0
        if cfg.stale_policy != "drop":
            samples, masked = bound_tokens(samples, version, cfg.max_staleness)
            stale_engine_tokens, stale_rollouts = stale_completion_tokens(ok, version - cfg.max_staleness)
            self.stale_tokens_masked += masked
            self.stale_engine_tokens += stale_engine_tokens
            self.stale_rollouts += stale_rollouts
        for s in samples:  # the hard bound, re-checked where it matters
            assert s.min_version < 0 or version - s.min_version <= cfg.max_staleness, (s.source, version)
        t0 = _now()
        metrics: dict[str, Any] | None = None
        if samples:
            metrics = await self.trainer.step(samples)
            await self.sync.publish(self.trainer.state_dict_for_engine(), self.trainer.version)
            await self.sync.apply(self.runner.engine)
            await self.gate.advance(self.trainer.version)
        else:
            await self.trainer.skip()
        train_s = _now() - t0
        self.trainer_busy_s += train_s
        trajs = [t for g in groups for t in g.trajectories]
        trained_groups = {s.group_id for s in samples}
        now = _now()
        tokens = self.runner.completion_tokens
        # The lag of what the step trains on (the bound holds for it); of the groups when nothing trains.
        lags = [version - s.min_version for s in samples if s.min_version >= 0] or [
            version - g.min_version for g in groups
        ]
        elapsed = now - self._t_start
        record: dict[str, Any] = {
            "version": self.trainer.version,
            "mode": cfg.mode,
            **rollout_stats(trajs),
            "groups": {
                "trained": len(ok),
                "too_few": len(too_few),
                "dropped_stale": dropped_stale,
                "dropped_stale_total": self.buffer.dropped_stale,
                "dropped_stale_tokens_total": self.buffer.dropped_tokens,
                # a set, not a scan of the samples per group: that was O(groups x samples) per
                # step, ~1 s a step at 10k sandboxes (bench/scale.py)
                "zero_advantage": sum(1 for g in ok if f"{g.task_id}#{g.index}" not in trained_groups),
            },
            "samples": len(samples),
            "stale_policy": cfg.stale_policy,
            "stale_tokens_masked": masked,
            "stale_engine_tokens": stale_engine_tokens,
            "stale_rollouts": stale_rollouts,
            "partial_pauses_total": self.gate.pauses,
            "split_turns": count_split_turns(samples),
            "summary_segment_samples": count_summary_segment_samples(samples),
            "updated": metrics is not None,
            "policy_version_lag": {"mean": sum(lags) / len(lags), "max": max(lags)},
            "group_version_lag_max": max(version - g.min_version for g in groups),
            "engine_version": self.runner.engine.version,
            "tokens_per_s": (tokens - self._last_tokens) / max(1e-9, now - self._last),
            "train_s": train_s,
            "interval_s": now - self._last,
            "elapsed_s": elapsed,
            "trainer_idle_fraction": self.trainer_wait_s
            / max(1e-9, self.trainer_wait_s + self.trainer_busy_s),
            "trajectories_per_min": (self.runner.finished - self._finished0) / max(1e-9, elapsed) * 60,
            "trainer": metrics or {},
        }
        counts = self.runner.engine.decode_counts()
        if counts is not None and self._last_engine is not None:
            d_steps = counts[0] - self._last_engine[0]
            record["engine_decode_batch_mean"] = (
                (counts[1] - self._last_engine[1]) / d_steps if d_steps else 0.0
            )
        self._last_engine = counts
        self._last, self._last_tokens = now, tokens
        self.history.append(record)
        self.trainer.set_data_state(self.data_state())
        self.on_step(self.trainer.steps, record)
