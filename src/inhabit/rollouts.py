"""Rollouts as groups: `RolloutConfig` (the `[rollout]` table) and `EngineRunner`, G episodes of a
task through the real harness, sandbox and engine.

`EngineRunner` is the `RolloutRunner` (inhabit.contracts) of a run on this machine, and the base
of the Ray placement's `DispatchRunner`. Every episode gets its own `LocalPolicy` over the one
shared engine (which batches all of them), a fresh sandbox from the task's workspace, and
grading (`inhabit.harness.rollout.run_rollout`).
Whatever goes wrong (a sandbox error, an engine error, a timeout, a bug) ends as a trajectory
with a status and an error, never as an exception out of `run_group`: a failed rollout is data.
Every trajectory is appended to `trajectories.jsonl` in the run folder, with `metadata` saying
which group, rollout and purpose ("train" or "eval") it belonged to.

Admission (`rollout.concurrency` slots, held for a whole episode and its grading): a group takes
its G slots at once and starts its G episodes together; each slot is given back as its rollout
ends. Admitting rollouts one by one, as graders finished, staggered the episodes so that the
engine decoded ~3 sequences per step instead of ~28 (bench/pipeline.py, async): on an engine whose
step cost is mostly fixed overhead that cost ~30% more CPU per trajectory.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from inhabit.config import Config
from inhabit.contracts import Group, Policy
from inhabit.errors import RolloutsFailing
from inhabit.grading.gradecache import GradeCache
from inhabit.harness.config import HarnessConfig
from inhabit.harness.rollout import run_rollout
from inhabit.inference.engine import InferenceEngine
from inhabit.inference.local_policy import LocalPolicy
from inhabit.log import get_logger
from inhabit.sandbox.base import SandboxProvider
from inhabit.tasks.task import Task
from inhabit.types import TRAINABLE_STATUSES, Trajectory

if TYPE_CHECKING:
    from inhabit.rewards.compose import RewardComposer, RewardConfig

log = get_logger(__name__)
FAILED_STATUSES = frozenset({"policy_error", "sandbox_error", "grading_error", "error"})
"""Statuses of rollouts that failed for a reason outside the agent's control."""
MAX_RERUNS = 2
"""Times one episode runs again after its engine replica died under it."""


class RolloutConfig(Config):
    """How rollouts are generated."""

    group_size: int = Field(8, ge=1, le=1024, description="G: rollouts per task (one group).")
    tasks_per_step: int = Field(4, ge=1, description="Groups the trainer consumes per step.")
    concurrency: int = Field(
        16,
        ge=1,
        description="Episodes (with their grading) running at the same time; a group whose G fits "
        "starts its G episodes together, when G slots are free.",
    )
    waves: bool = Field(
        False,
        description="Async: start tasks_per_step groups together once every group started before has "
        "completed (sync's rhythm, without waiting for the trainer), so their episodes decode in one "
        "batch; False: start each group as soon as the staleness bound and the slots allow.",
    )
    temperature: float = Field(1.0, gt=0, le=10, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    max_tokens: int = Field(256, ge=8, description="Tokens one model turn may generate.")
    timeout_s: float = Field(
        600.0, gt=0, description="Wall-clock cap on one rollout (episode + grading); past it: status error."
    )
    train_zero_advantage: bool = Field(
        False,
        description="Also train groups whose rollouts all got the same reward (their gradient is zero; "
        "the step still runs and the version moves: for tests and timing, not for learning).",
    )
    grade_cache: bool = Field(
        True,
        description="Grade each distinct final workspace of a group once: a rollout whose files (the same task, "
        "grading settings and bytes) were already graded in its group gets that result, marked "
        "cached in its record (inhabit.grading.gradecache says why no cheat gains by it). False: "
        "grade every rollout.",
    )
    min_group_size: int = Field(
        2, ge=1, description="A group trains only if at least this many rollouts did not fail."
    )
    max_failure_streak: int = Field(
        256,
        ge=0,
        description="Stop the run (RolloutsFailing) after this many rollouts in a row ended in an "
        "engine or infrastructure error (policy_error, sandbox_error, grading_error, error); 0: never.",
    )


_GROUP_GRADES: contextvars.ContextVar[GradeCache | None] = contextvars.ContextVar(
    "group_grades", default=None
)
"""The grade cache of the group whose episode this is (set by `EngineRunner.group_grade_cache`)."""


class TrajectoryLog:
    """Appends trajectory records (one JSON object per line) to a file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a")
        self.written = 0

    def write(self, traj: Trajectory) -> None:
        self._file.write(traj.to_json() + "\n")
        self._file.flush()
        self.written += 1

    def close(self) -> None:
        self._file.close()


class Slots:
    """A counting semaphore whose `acquire(n)` takes n slots at once, first come first served."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.free = capacity
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    async def acquire(self, n: int = 1) -> None:
        if n > self.capacity:
            raise ValueError(f"cannot take {n} of {self.capacity} slots")
        if not self._waiters and self.free >= n:
            self.free -= n
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((n, fut))
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # granted as we were cancelled: give back
                self.release(n)
            else:
                # _grant may already have dropped our cancelled future (a release between the
                # cancel and this handler running)
                with contextlib.suppress(ValueError):
                    self._waiters.remove((n, fut))
                self._grant()  # we may have been blocking smaller requests behind us
            raise

    def release(self, n: int = 1) -> None:
        self.free += n
        self._grant()

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[None]:
        """One slot for the body of the `async with`."""
        await self.acquire(1)
        try:
            yield
        finally:
            self.release(1)

    def _grant(self) -> None:
        while self._waiters and self.free >= self._waiters[0][0]:
            n, fut = self._waiters.popleft()
            if fut.cancelled():
                continue
            self.free -= n
            fut.set_result(None)


class EngineRunner:
    """Runs episodes against one engine; `run_group` never raises for a failed rollout."""

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: Any,
        provider: SandboxProvider,
        *,
        harness: HarnessConfig,
        rollout: RolloutConfig,
        log_file: TrajectoryLog | None = None,
        seed: int = 0,
        composer: RewardComposer | None = None,
    ) -> None:
        self.engine, self.tokenizer, self.provider = engine, tokenizer, provider
        # The episode: with the run's `[reward]` table (a RewardComposer), graded and composed;
        # with rollout.grade_cache, graded once per distinct final workspace of its group; None
        # (neither): `run_rollout`, every rollout graded, grading's test reward alone.
        self.rollout_fn = self._graded_rollout if composer is not None or rollout.grade_cache else None
        self._composer = composer  # closed by `close` (its judges hold HTTP clients)
        # rollout.max_tokens caps every model turn (the harness's own cap may be lower).
        self.harness = harness.model_copy(
            update={"max_turn_tokens": min(harness.max_turn_tokens, rollout.max_tokens)}
        )
        self.cfg = rollout
        self.log_file = log_file
        self.seed = seed
        self._slots = Slots(rollout.concurrency)
        self._episodes = 0
        self.completion_tokens = 0
        self.finished = 0
        self.reruns = 0
        self.failure_streak = 0
        self.wrap_policy: Callable[[Policy, Any], Policy] | None = None
        """Set by the pipeline (stale_policy "partial"): wraps each episode's policy, given its engine."""
        """Rollouts in a row that ended in an engine or infrastructure error."""
        """Episodes run again because their engine replica died under them (never recorded twice)."""

    async def run_one(
        self, task: Task, meta: dict[str, Any], *, slot_taken: Callable[[], None] | None = None
    ) -> Trajectory:
        """One episode. `slot_taken`: the caller already holds this episode's slot and this is
        called once the episode no longer needs it; None: take (and give back) a slot here."""
        self._episodes += 1  # before any wait: sampling seeds follow the order of the calls
        seed = self.seed * 1_000_003 + self._episodes * 7919
        if slot_taken is None:
            await self._slots.acquire(1)
            slot_taken = self._slots.release
        try:
            for attempt in range(MAX_RERUNS + 1):
                # Several engines (`ReplicaSet`): the episode stays on the one its lease picked.
                lease = self.engine.lease() if hasattr(self.engine, "lease") else None
                engine = lease or self.engine
                policy = LocalPolicy(
                    engine, self.tokenizer, temperature=self.cfg.temperature, top_p=self.cfg.top_p, seed=seed
                )
                if self.wrap_policy is not None:
                    policy = self.wrap_policy(policy, engine)
                try:
                    traj = await self._episode(task, meta, policy)
                finally:
                    if lease is not None:
                        lease.release()
                if lease is None or not lease.lost or attempt == MAX_RERUNS:
                    break
                # Its engine died under it: the episode is thrown away and runs again from the start.
                self.reruns += 1
        finally:
            slot_taken()
        self.completion_tokens += sum(t.completion_tokens or 0 for s in traj.segments for t in s.turns)
        self.finished += 1
        if self.log_file is not None:
            self.log_file.write(traj)
        self._count_failure(traj)
        return traj

    async def _graded_rollout(
        self, task: Task, policy: Policy, provider: SandboxProvider, *, config: HarnessConfig
    ) -> Trajectory:
        """`run_rollout` with the run's composer and the group's grade cache (`group_grade_cache`)."""
        return await run_rollout(
            task, policy, provider, config=config, composer=self._composer, grade_cache=_GROUP_GRADES.get()
        )

    @contextlib.contextmanager
    def group_grade_cache(self) -> Iterator[None]:
        """Around one group's episodes (tasks they start inherit it): a fresh `GradeCache` that its
        rollouts share and that ends with the group (why not longer: `inhabit.grading.gradecache`)."""
        token = _GROUP_GRADES.set(GradeCache() if self.cfg.grade_cache else None)
        try:
            yield
        finally:
            _GROUP_GRADES.reset(token)

    async def close(self) -> None:
        """Release what the episodes hold beyond the engine and sandboxes: the judges' clients."""
        composer, self._composer, self.rollout_fn = self._composer, None, None
        if composer is not None:
            await composer.close()

    def _count_failure(self, traj: Trajectory) -> None:
        # A failed rollout is data, but an unbroken run of them means nothing works (an engine that
        # answers only errors, a sandbox that cannot start): without this a run would generate,
        # drop and generate again forever.
        self.failure_streak = self.failure_streak + 1 if traj.status in FAILED_STATUSES else 0
        limit = self.cfg.max_failure_streak
        if limit and self.failure_streak >= limit:
            raise RolloutsFailing(
                f"the last {self.failure_streak} rollouts all failed (rollout.max_failure_streak); "
                f"the latest ({traj.task_id}, status {traj.status}): {traj.error or 'no error message'}"
            )

    async def _episode(self, task: Task, meta: dict[str, Any], policy: Policy) -> Trajectory:
        t0 = time.monotonic()
        traj = await guarded_rollout(
            task, policy, self.provider, self.harness, self.cfg.timeout_s, rollout_fn=self.rollout_fn
        )
        assert traj is not None  # no deadline here: a timeout is data
        return traj.model_copy(
            update={"metadata": {**traj.metadata, **meta, "wall_s": round(time.monotonic() - t0, 4)}}
        )

    async def run_group(
        self, task: Task, index: int, *, purpose: str = "train", size: int | None = None
    ) -> Group:
        """G episodes of `task`, admitted together (module docstring) when G fits the slots."""
        start = self.engine.version
        g = size or self.cfg.group_size
        metas = [{"purpose": purpose, "group": index, "rollout": i} for i in range(g)]
        with self.group_grade_cache():
            trajs = await self._run_metas(task, metas)
        return Group(task_id=task.id, index=index, trajectories=list(trajs), start_version=start, task=task)

    async def _run_metas(self, task: Task, metas: list[dict[str, Any]]) -> list[Trajectory]:
        g = len(metas)
        if g > self._slots.capacity:  # cannot start together: one slot per episode
            trajs = await asyncio.gather(*(self.run_one(task, m) for m in metas))
        else:
            await self._slots.acquire(g)
            given_back = 0

            def give_back() -> None:
                nonlocal given_back
                given_back += 1
                self._slots.release(1)

            try:
                trajs = await asyncio.gather(*(self.run_one(task, m, slot_taken=give_back) for m in metas))
            finally:  # episodes cancelled before they began never give theirs back
                self._slots.release(g - given_back)
        return list(trajs)


async def guarded_rollout(
    task: Task,
    policy: Policy,
    provider: SandboxProvider,
    harness: HarnessConfig,
    timeout_s: float,
    *,
    deadline_s: float | None = None,
    rollout_fn: Callable[..., Awaitable[Trajectory]] | None = None,
) -> Trajectory | None:
    """One harness episode that never raises: a rollout over `timeout_s` or one that raised becomes
    a failed trajectory (status "error"), and a finished one whose engine request failed in some
    turn becomes "policy_error". `deadline_s`, when it comes before `timeout_s`, is the caller's own
    time limit (a run ending): hitting it returns None, a cut rather than a data point.
    `rollout_fn`: the episode (None: `run_rollout`; `inhabit.orchestrator.scale` passes a simulated one)."""
    cut = deadline_s is not None and deadline_s <= timeout_s
    try:
        traj = await asyncio.wait_for(
            (rollout_fn or run_rollout)(task, policy, provider, config=harness),
            deadline_s if cut else timeout_s,
        )
    except TimeoutError:
        if cut:
            return None
        traj = _failed(task, "error", f"timeout: the rollout took over {timeout_s:g} s")
    except Exception as e:  # run_rollout turns failures into data; this is the last guard
        log.exception("rollout of %s raised", task.id)
        traj = _failed(task, "error", f"{type(e).__name__}: {e}")
    if traj.status in TRAINABLE_STATUSES and (engine_error := _engine_error(traj)):
        traj = traj.model_copy(update={"status": "policy_error", "error": engine_error})
    return traj


def reward_composer(reward: RewardConfig | None) -> RewardComposer | None:
    """The RewardComposer of a run's `[reward]` table, or None when the run has none."""
    if reward is None:
        return None
    from inhabit.rewards.compose import RewardComposer  # judges' HTTP clients: only for a [reward] run

    return RewardComposer(reward)


def _failed(task: Task, status: str, error: str) -> Trajectory:
    return Trajectory(task_id=task.id, instruction=task.instruction, status=status, error=error)  # type: ignore[arg-type]


def _engine_error(traj: Trajectory) -> str | None:
    for seg in traj.segments:
        for turn in seg.turns:
            if turn.finish_reason == "error":
                return "engine error in a turn"
    return None
