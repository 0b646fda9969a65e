"""`DispatchRunner`: the rollout runner when engines and sandboxes are Ray actors.

It is an `EngineRunner` (`inhabit.rollouts`; the pipeline and evaluation call `run_group` as
usual) that adds:

- Placement per rollout: each rollout attempt takes the engine and the env server with the
  least outstanding rollouts (`Fleet.pick`) and keeps them for the whole episode, so one
  episode's turns hit one engine and its sandbox lives on one server.
- Retries of lost work: an attempt whose engine actor died (`EngineLost`), or whose env server no
  longer answers or told it it was shutting down (`EnvServerLost`, counted in the provider's
  `losses`), is thrown away and the rollout runs again from the start on other actors (at
  most `max_attempts` times). The rollout keeps its id (`metadata.trajectory_id`:
  purpose:group:rollout; unique within a run attempt, `metadata.run_attempt`, which a trainer
  restart increments), only the finished attempt is recorded, so a fault neither loses a
  rollout nor counts it twice. With `resume_lost` (stale_policy "partial") a lost engine costs
  less: the episode moves to another engine with its prefix and goes on (`_Lease`; counted as
  `resumed`); only a lost env server (the sandbox is gone) runs a rollout again. Anything else that fails (the agent broke the sandbox, a bad
  turn) is data as always: the failed trajectory is kept.
- Stragglers: a training group starts `G + oversample` rollouts and is complete when `G` have
  finished; the rest are cancelled. With `deadline_s`, a rollout not done that long after its
  group asked for it (queueing for a slot or an actor counts) is cancelled and left out (the
  group trains on the rest under the usual group rule).
  Both kinds of cut work are counted (`metrics()`), never silently dropped. Evaluation groups
  neither over-sample nor cut (that would bias the success rate towards quick episodes).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from inhabit.contracts import Group
from inhabit.inference.engine import InferenceEngine
from inhabit.inference.local_policy import LocalPolicy
from inhabit.log import get_logger
from inhabit.placement.config import RayConfig
from inhabit.placement.engines import EngineLost, EnginePool
from inhabit.placement.fleet import Fleet, Member
from inhabit.rollouts import EngineRunner, guarded_rollout
from inhabit.sandbox.base import SandboxProvider
from inhabit.tasks.task import Task
from inhabit.types import TRAINABLE_STATUSES, Trajectory

log = get_logger(__name__)


class _Lease(InferenceEngine):
    """One engine actor for one rollout attempt; remembers whether the actor died under it.

    With `fleet` given (`DispatchRunner.resume_lost`), a request whose actor died moves to another
    live one instead: the request holds the whole prefix, which the new engine prefills on the
    weights it holds, so the episode goes on with its turns so far (only the turn in progress is
    decoded again), at most `max_moves` times before the attempt counts as lost."""

    def __init__(
        self, member: Member, fleet: Fleet | None = None, avoid: set[int] | None = None, max_moves: int = 0
    ) -> None:
        self.member, self.engine = member, member.payload
        self.max_model_len = self.engine.max_model_len
        self.lost = False
        self.fleet, self.avoid, self.max_moves = fleet, avoid if avoid is not None else set(), max_moves
        self.moves = 0

    @property
    def version(self) -> int:
        return self.engine.version

    async def generate(self, requests: Any) -> Any:
        while True:
            try:
                return await self.engine.generate(requests)
            except EngineLost:
                if self.fleet is None or self.moves >= self.max_moves:
                    self.lost = True
                    raise
            self.moves += 1
            dead = self.member
            self.fleet.mark_dead(dead, "a generate call failed")
            self.avoid.add(dead.index)
            self.fleet.release(dead)
            self.member = await self.fleet.acquire(self.avoid)
            self.engine = self.member.payload

    async def load_weights(self, weights: Any, version: int) -> None:
        raise NotImplementedError("weights reach engine actors through the weight store")


class DispatchRunner(EngineRunner):
    """Runs groups across engine and env-server actors (see module docstring)."""

    def __init__(
        self,
        engine: EnginePool,
        tokenizer: Any,
        provider: SandboxProvider | None,
        *,
        env_servers: Fleet | None,
        ray: RayConfig,
        run_attempt: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(engine, tokenizer, provider, **kwargs)  # type: ignore[arg-type]
        self.pool = engine
        self.env_servers = env_servers
        self.ray = ray
        self.run_attempt = run_attempt
        self.counts: Counter[str] = Counter()
        self.dispatch_s = 0.0
        self.resume_lost = False
        """Set by the pipeline (stale_policy "partial"): a rollout whose engine died goes on on
        another engine with its prefix (`_Lease`) instead of running again from the start."""

    # ------------------------------------------------------------------ groups
    async def run_group(
        self, task: Task, index: int, *, purpose: str = "train", size: int | None = None
    ) -> Group:
        start = self.engine.version
        g = size or self.cfg.group_size
        train = purpose == "train"
        slots = g + (self.ray.oversample if train else 0)
        deadline = self.ray.deadline_s if train else None
        with self.group_grade_cache():  # the tasks inherit the group's grade cache as they start
            pending = {
                asyncio.create_task(self._rollout(task, purpose, index, i, deadline)) for i in range(slots)
            }
        kept: list[Trajectory] = []
        try:
            while pending and len(kept) < g:
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    traj = t.result()
                    if traj is not None:
                        kept.append(traj)
        finally:
            for t in pending:
                t.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self.counts["cut_surplus"] += len(pending)
        surplus = kept[g:]  # finished in the same instant as the G-th: also cut
        self.counts["cut_surplus"] += len(surplus)
        kept = sorted(kept[:g], key=lambda t: t.metadata["rollout"])
        for traj in kept:
            self._record(traj)
        return Group(task_id=task.id, index=index, trajectories=kept, start_version=start, task=task)

    def _record(self, traj: Trajectory) -> None:
        self.completion_tokens += sum(t.completion_tokens or 0 for s in traj.segments for t in s.turns)
        self.finished += 1
        if self.log_file is not None:
            self.log_file.write(traj)

    # ------------------------------------------------------------------ rollouts
    async def _rollout(
        self, task: Task, purpose: str, group: int, i: int, deadline: float | None
    ) -> Trajectory | None:
        """One rollout, retried on lost actors; None when cut by the deadline."""
        meta = {
            "purpose": purpose, "group": group, "rollout": i, "trajectory_id": f"{purpose}:{group}:{i}",
            "run_attempt": self.run_attempt,
        }  # fmt: skip
        # An absolute time: waiting for a slot, an engine or an env server counts against it too.
        # The loop's clock (monotonic in a run, virtual under `inhabit scale simulate`).
        clock = asyncio.get_running_loop().time
        until = None if deadline is None else clock() + deadline
        avoid_e: set[int] = set()
        avoid_s: set[int] = set()
        traj: Trajectory | None = None
        for attempt in range(1, self.ray.max_attempts + 1):
            if until is not None and clock() >= until:
                break
            traj, lost = await self._attempt(task, meta, until, avoid_e, avoid_s)
            if traj is None:  # the deadline passed during this attempt
                break
            traj = traj.model_copy(update={"metadata": {**traj.metadata, "attempts": attempt}})
            if not lost:
                return traj
            self.counts["retried"] += 1
            log.warning("rollout %s lost an actor (%s); trying again elsewhere", meta["trajectory_id"], lost)
        else:
            return traj  # out of attempts: the last failed trajectory is the data
        self.counts["lost_to_deadline"] += 1
        return None

    async def _attempt(
        self, task: Task, meta: dict[str, Any], until: float | None, avoid_e: set[int], avoid_s: set[int]
    ) -> tuple[Trajectory | None, str | None]:
        self._episodes += 1
        async with self._slots.slot():  # one slot per attempt (retries, oversampling)
            d0 = asyncio.get_running_loop().time()
            em = await self.pool.fleet.acquire(avoid_e)
            sm = await self.env_servers.acquire(avoid_s) if self.env_servers is not None else None
            self.dispatch_s += asyncio.get_running_loop().time() - d0
            if self.resume_lost:
                lease = _Lease(em, self.pool.fleet, avoid_e, max_moves=self.ray.max_attempts - 1)
            else:
                lease = _Lease(em)
            provider = sm.payload if sm is not None else self.provider
            losses = sm.payload.losses if sm is not None else 0
            t0 = asyncio.get_running_loop().time()
            left = None if until is None else until - t0  # <= 0: cut at once (leases still released)
            try:
                traj = await self._episode_on(task, lease, provider, left)
            finally:
                em = lease.member  # the engine the episode ended on (another one after a move)
                self.pool.fleet.release(em)
                self.counts["resumed"] += lease.moves
                if sm is not None:
                    self.env_servers.release(sm)
            if traj is None:
                return None, None  # the deadline, not the rollout timeout: cut, not data
            lost = None
            if lease.lost:
                self.pool.fleet.mark_dead(em, "a generate call failed")
                avoid_e.add(em.index)
                lost = f"engine {em.index}"
            # EnvServerLost during the episode (a tool call, grading) loses it even when the
            # trajectory still looks finished: its observations are the server's errors.
            env_lost = sm is not None and sm.payload.losses > losses
            if (
                sm is not None
                and (env_lost or traj.status not in TRAINABLE_STATUSES)
                and not await self._alive(sm)
            ):
                self.env_servers.mark_dead(sm, "health check failed after a failed rollout")
                avoid_s.add(sm.index)
                lost = f"env server {sm.index}"
            elif env_lost:
                avoid_s.add(sm.index)
                lost = f"env server {sm.index} (unreachable for a while)"
            traj = traj.model_copy(
                update={
                    "metadata": {
                        **traj.metadata, **meta, "wall_s": round(asyncio.get_running_loop().time() - t0, 4),
                        "engine": em.index, "env_server": sm.index if sm is not None else None,
                    }
                }
            )  # fmt: skip
            return traj, lost

    async def _episode_on(
        self, task: Task, lease: InferenceEngine, provider: SandboxProvider, left: float | None
    ) -> Trajectory | None:
        """One episode of `task` on the leased engine and env server's sandboxes; None when cut by
        `left` seconds (the deadline). `inhabit.orchestrator.scale` replaces this with a simulated episode."""
        policy = LocalPolicy(
            lease, self.tokenizer, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
            seed=self.seed * 1_000_003 + self._episodes * 7919,
        )  # fmt: skip
        if self.wrap_policy is not None:
            policy = self.wrap_policy(policy, lease)
        return await guarded_rollout(
            task,
            policy,
            provider,
            self.harness,
            self.cfg.timeout_s,
            deadline_s=left,
            rollout_fn=self.rollout_fn,
        )

    async def _alive(self, m: Member) -> bool:
        try:
            await asyncio.wait_for(m.payload.health(), self.ray.probe_timeout_s)
        except Exception:
            return False
        return True

    # ------------------------------------------------------------------ metrics
    def metrics(self) -> dict[str, Any]:
        """Cumulative dispatch counters (added to every step record as `dispatch`)."""
        out: dict[str, Any] = {
            "retried": self.counts["retried"],
            "resumed": self.counts["resumed"],
            "lost_to_deadline": self.counts["lost_to_deadline"],
            "cut_surplus": self.counts["cut_surplus"],
            "dispatch_wait_s": round(self.dispatch_s, 4),
            "engines": self.pool.fleet.stats(),
        }
        if self.env_servers is not None:
            out["env_servers"] = self.env_servers.stats()
        return out
