"""The simulated parts a scenario's real orchestration code drives (docs/scale.md).

    SimEngine      an engine actor's driver-side view (what `RayEngine` is in a Ray run): `generate`
                   decodes by processor sharing, one token per running sequence per decode step of
                   `step_s + per_seq_s * batch` seconds; `sync` fetches a delta over its cluster's
                   link and pauses decoding to swap it in; `crash` fails every request in flight
    ClusterLink    one cluster's link from the weight store (relayed or fetched by every engine)
    SimEnvServer   an env server's sandboxes: `hold(seconds)` is sandbox work (create, a tool call,
                   grading); `lose` fails every call in flight, as a server that went away does
    SimPolicy      a `Policy` whose turns are requests to the leased engine
    sim_episode    a harness episode's shape: create, turns (generate + tool call), grading
    SimTrainer     a `TrainerHandle` whose step takes `step_s + per_token_s * tokens / data_parallel`

Only asyncio timers: no thread, no sleep on the wall clock, so under looptime's virtual clock a
scenario runs as fast as the real code can handle its events.
"""

from __future__ import annotations

import asyncio
import bisect
import collections
import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inhabit.contracts import Message, Policy, PolicyTurn, TrainerHandle
from inhabit.errors import InferenceError
from inhabit.orchestrator.scale.config import ClusterModel, EngineModel, EpisodeModel, TrainerModel
from inhabit.placement.engines import EngineLost
from inhabit.types import Segment, Trajectory, TurnRecord


@dataclass
class SimRequest:
    """One turn's request: prompt tokens to prefill, tokens to generate."""

    prompt_tokens: int
    tokens: int


@dataclass
class SimCompletion:
    tokens: int
    versions: tuple[int, int]
    """(version when the first token was generated, version at the last one)."""
    token_versions: list[int] = field(default_factory=list)
    """The version of evenly spaced tokens (at most `VERSION_SAMPLES`), as the engine swaps
    weights between two decode steps of the request: what a real engine records per token."""


VERSION_SAMPLES = 16
"""Per-token versions a simulated turn reports: a real engine reports one per token, and the
bound's accounting weighs each of these by the share of the turn's tokens it stands for."""


class ClusterLink:
    """The store -> cluster link (see `ClusterModel`)."""

    def __init__(self, index: int, model: ClusterModel) -> None:
        self.index, self.model = index, model
        self.engines: list[SimEngine] = []
        self.link_bytes = 0.0
        self._relayed: dict[int, asyncio.Future[None]] = {}

    def _link_s(self, nbytes: float) -> float:
        return self.model.latency_s + nbytes * 8 / (self.model.link_gbps * 1e9)

    async def fetch(self, version: int, nbytes: float) -> None:
        """Bring `nbytes` (the deltas up to `version`) to one engine of this cluster."""
        if self.model.relay:
            fut = self._relayed.get(version)
            if fut is None:  # the first engine to ask pulls it across the link for everyone
                fut = self._relayed[version] = asyncio.get_running_loop().create_future()
                self.link_bytes += nbytes
                await asyncio.sleep(self._link_s(nbytes))
                fut.set_result(None)
            else:
                await fut
            await asyncio.sleep(nbytes * 8 / (self.model.intra_gbps * 1e9))
        else:  # every live engine fetches at once over the shared link (EnginePool.sync_to)
            sharing = max(1, sum(not e.dead for e in self.engines))
            self.link_bytes += nbytes
            await asyncio.sleep(self._link_s(nbytes * sharing))


class SimEngine:
    """One simulated engine (module docstring); the payload of an engine `Fleet` member."""

    max_model_len = 1 << 20

    def __init__(
        self, index: int, model: EngineModel, link: ClusterLink, *, slow: float, delta_bytes: float
    ) -> None:
        self.index, self.model, self.link, self.slow = index, model, link, slow
        self.delta_bytes = delta_bytes
        self.version = 0
        self.store_url: str | None = None
        self.dead = False
        self._loop = asyncio.get_running_loop()
        # Processor sharing: S is the tokens each running sequence has received so far; a
        # sequence admitted at S0 for n tokens finishes when S reaches S0 + n.
        self._S = 0.0
        self._t = self._loop.time()
        self._heap: list[list[Any]] = []  # [target S, seq, future, start version]
        self._n = 0  # running sequences (cancelled ones leave the heap lazily)
        self._waiting: collections.deque[tuple[int, asyncio.Future[SimCompletion], list[Any]]] = (
            collections.deque()
        )
        self._seq = 0
        self._timer: asyncio.TimerHandle | None = None
        self._paused = 0
        # Where the weights changed, in S (tokens per running sequence): a sequence's tokens after
        # `_swap_S[i]` came from `_swap_v[i]` (a swap lands between two decode steps).
        self._swap_S: list[float] = []
        self._swap_v: list[int] = []
        self.busy_s = 0.0
        self.batch_s = 0.0
        self.pause_s = 0.0
        self.swaps = 0
        self.crashes = 0
        self.tokens = 0

    # ------------------------------------------------------------------ decoding
    def _rate(self) -> float:
        if self._paused or not self._n:
            return 0.0
        return 1.0 / ((self.model.step_s + self.model.per_seq_s * self._n) * self.slow)

    def _advance(self) -> None:
        now = self._loop.time()
        dt = now - self._t
        if dt > 0 and self._n and not self._paused:
            self._S += dt * self._rate()
            self.busy_s += dt
            self.batch_s += dt * self._n
        self._t = now

    def _reschedule(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        while self._heap and self._heap[0][2].done():  # cancelled: already out of the batch
            heapq.heappop(self._heap)
        rate = self._rate()
        if self._heap and rate > 0:
            self._timer = self._loop.call_later(max(0.0, (self._heap[0][0] - self._S) / rate), self._tick)

    def _tick(self) -> None:
        self._timer = None
        self._advance()
        while self._heap and (self._heap[0][0] <= self._S + 1e-6 or self._heap[0][2].done()):
            target, _, fut, v0 = heapq.heappop(self._heap)
            if not fut.done():
                self._n -= 1
                fut.set_result(
                    SimCompletion(
                        round(target - v0[1]),
                        (v0[0], self.version),
                        self._token_versions(v0[0], v0[1], target),
                    )
                )
        self._admit()
        self._reschedule()

    def _token_versions(self, v0: int, s0: float, s1: float) -> list[int]:
        """The versions of `VERSION_SAMPLES` evenly spaced tokens of a sequence decoded from S = s0
        (on version v0) to s1."""
        n = max(1, min(VERSION_SAMPLES, round(s1 - s0)))
        first = bisect.bisect_right(self._swap_S, s0)
        if first == len(self._swap_S):  # no swap during the request: the common case
            return [v0] * n
        out = []
        for i in range(n):
            at = s0 + (i + 0.5) * (s1 - s0) / n
            k = bisect.bisect_right(self._swap_S, at, lo=first) - 1
            out.append(self._swap_v[k] if k >= first else v0)
        return out

    def _admit(self) -> None:
        while self._waiting and self._n < self.model.max_batch:
            tokens, fut, entry = self._waiting.popleft()
            if fut.done():
                continue
            entry[0] = self._S + tokens
            entry[3] = (self.version, self._S)
            heapq.heappush(self._heap, entry)
            self._n += 1

    def _drop(self) -> None:
        """A request's caller gave up (its rollout was cut): its row is free at once."""
        if not self.dead:
            self._advance()
            self._n -= 1
            self._admit()
            self._reschedule()

    async def generate(self, requests: Sequence[SimRequest]) -> list[SimCompletion]:
        (req,) = requests
        if self.dead:
            raise EngineLost("engine actor died: simulated crash")
        await asyncio.sleep(req.prompt_tokens / self.model.prefill_tokens_per_s * self.slow)
        if self.dead:
            raise EngineLost("engine actor died: simulated crash")
        self._advance()
        fut: asyncio.Future[SimCompletion] = self._loop.create_future()
        self._seq += 1
        entry: list[Any] = [0.0, self._seq, fut, None]
        self._waiting.append((req.tokens, fut, entry))
        self._admit()
        self._reschedule()
        try:
            out = await fut
        except asyncio.CancelledError:
            # Awaiting `fut` cancelled it too; a running (admitted) sequence gives its row back.
            if entry[3] is not None and fut.cancelled():
                self._drop()
            raise
        if isinstance(out, Exception):
            raise out
        self.tokens += out.tokens
        return [out]

    # ------------------------------------------------------------------ weights
    async def sync(self, store_url: str, version: int | None) -> int:
        """Fetch the deltas up to `version` over the cluster link, then pause to swap them in."""
        if self.dead:
            raise EngineLost("engine actor died during weight sync: simulated crash")
        if version is None or version <= self.version:
            self.store_url = store_url
            return self.version
        await self.link.fetch(version, self.delta_bytes * (version - self.version))
        if self.dead:
            raise EngineLost("engine actor died during weight sync: simulated crash")
        pause = self.model.swap_pause_s * self.slow
        self._advance()
        self._paused += 1
        self._reschedule()
        await asyncio.sleep(pause)
        self._advance()
        self._paused -= 1
        self.pause_s += pause
        self.swaps += 1
        self.version = max(self.version, version)
        self.store_url = store_url
        self._mark_swap()
        self._reschedule()
        return self.version

    def _mark_swap(self) -> None:
        if self._swap_v and self._swap_v[-1] == self.version:
            return
        self._swap_S.append(self._S)
        self._swap_v.append(self.version)

    # ------------------------------------------------------------------ faults
    def crash(self) -> None:
        """The actor died: every request in flight fails with `EngineLost`."""
        if self.dead:
            return
        self._advance()
        self.dead = True
        self.crashes += 1
        lost = EngineLost("engine actor died: simulated crash")
        for _, _, fut, _ in self._heap:
            if not fut.done():
                fut.set_result(lost)  # type: ignore[arg-type]  # raised by generate
        for _, fut, _ in self._waiting:
            if not fut.done():
                fut.set_result(lost)  # type: ignore[arg-type]
        self._heap.clear()
        self._waiting.clear()
        self._n = 0
        self._reschedule()

    async def restart(self, version: int, store_url: str | None) -> SimEngine:
        """The actor comes back (the Fleet's revive calls this) holding the newest weights."""
        await asyncio.sleep(self.model.restart_s)
        self._advance()
        self.dead = False
        self.version, self.store_url = max(self.version, version), store_url
        self._mark_swap()
        return self

    async def health(self) -> None:
        if self.dead:
            raise EngineLost("simulated crash")


class SandboxLost(Exception):
    """The env server went away during a sandbox call."""


class SimEnvServer:
    """One env server's sandboxes (module docstring); the payload of an env-server `Fleet` member."""

    def __init__(self, index: int, *, slow: float, restart_s: float) -> None:
        self.index, self.slow, self.restart_s = index, slow, restart_s
        self.losses = 0
        self.dead = False
        self._loop = asyncio.get_running_loop()
        self._pending: set[asyncio.Future[None]] = set()
        self.lost_count = 0

    async def hold(self, seconds: float) -> None:
        """Sandbox work taking `seconds` (times the node's slowness); SandboxLost if the server goes."""
        if self.dead:
            self.losses += 1
            raise SandboxLost(f"env server {self.index} is gone")
        fut: asyncio.Future[None] = self._loop.create_future()
        h = self._loop.call_later(seconds * self.slow, _resolve, fut)
        self._pending.add(fut)
        try:
            await fut
        except SandboxLost:
            self.losses += 1
            raise
        finally:
            h.cancel()
            self._pending.discard(fut)

    def lose(self) -> None:
        if self.dead:
            return
        self.dead = True
        self.lost_count += 1
        for fut in list(self._pending):
            if not fut.done():
                fut.set_exception(SandboxLost(f"env server {self.index} went away"))

    async def restart(self) -> SimEnvServer:
        await asyncio.sleep(self.restart_s)
        self.dead = False
        return self

    async def health(self) -> None:
        if self.dead:
            raise SandboxLost(f"env server {self.index} is gone")


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


class SimPolicy(Policy):
    """Turns are requests to the leased engine; an engine error is a failed turn (as LocalPolicy's)."""

    def __init__(self, engine: Any, episode: EpisodeModel, rng: random.Random) -> None:
        self.engine, self.episode, self.rng = engine, episode, rng

    async def next_turn(
        self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()
    ) -> PolicyTurn:
        prompt = max(1, round(self.episode.prompt_tokens.draw(self.rng)))
        tokens = max(1, min(max_tokens, round(self.episode.completion_tokens.draw(self.rng))))
        try:
            (c,) = await self.engine.generate([SimRequest(prompt, tokens)])
        except InferenceError as e:
            return PolicyTurn(text=str(e), finish_reason="error")
        return PolicyTurn(
            text="",
            prompt_token_ids=[0],
            completion_token_ids=[1] * len(c.token_versions),
            logprobs=[-1.0] * len(c.token_versions),
            versions=c.token_versions,
            prompt_tokens=prompt,
            completion_tokens=c.tokens,
        )

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return 0


async def sim_episode(task: Any, policy: SimPolicy, provider: SimEnvServer, *, config: Any) -> Trajectory:
    """One episode's shape (module docstring); the same outcomes as the harness's: a lost sandbox
    is a `sandbox_error`, an engine error ends the episode with an error turn."""
    sim = getattr(policy, "inner", policy)  # a partial rollout's PartialPolicy wraps the SimPolicy
    ep, rng = sim.episode, sim.rng
    turns: list[TurnRecord] = []
    status = "finished"
    try:
        await provider.hold(ep.create_s.draw(rng))
        for _ in range(max(1, round(ep.turns.draw(rng)))):
            t = await policy.next_turn((), max_tokens=config.max_turn_tokens)
            turns.append(
                TurnRecord(
                    text="",
                    finish_reason=t.finish_reason,
                    prompt_token_ids=t.prompt_token_ids,
                    completion_token_ids=t.completion_token_ids,
                    logprobs=t.logprobs,
                    versions=t.versions,
                    prompt_tokens=t.prompt_tokens,
                    completion_tokens=t.completion_tokens,
                )
            )
            if t.finish_reason == "error":
                break
            await provider.hold(ep.exec_s.draw(rng))
        await provider.hold(ep.grade_s.draw(rng))
    except SandboxLost as e:
        return Trajectory(task_id=task.id, instruction="", status="sandbox_error", error=str(e))
    reward = 1.0 if rng.random() < ep.reward_p else 0.0
    return Trajectory(
        task_id=task.id,
        instruction="",
        status=status,  # type: ignore[arg-type]
        segments=[Segment(index=0, messages=[], turns=turns)],
        reward=reward,
    )


class SimTrainer(TrainerHandle):
    """A trainer whose step takes the calibrated time (module docstring); it records the staleness
    of every sample it trains on, and reads each group's token count from `tokens_by_group`."""

    def __init__(self, model: TrainerModel, tokens_by_group: dict[str, int]) -> None:
        self.model = model
        self.version = 0
        self.steps = 0
        self.tokens_by_group = tokens_by_group
        self.staleness: collections.Counter[int] = collections.Counter()
        self.busy_s = 0.0
        self.step_ends: list[float] = []

    async def step(self, samples: list[Any]) -> dict[str, Any]:
        groups = {s.group_id for s in samples}
        tokens = sum(self.tokens_by_group.pop(g, 0) for g in groups)
        for s in samples:
            self.staleness[self.version - s.min_version] += 1
        seconds = self.model.step_s + self.model.per_token_s * tokens / self.model.data_parallel
        await asyncio.sleep(seconds)
        self.busy_s += seconds
        self.version += 1
        self.steps += 1
        self.step_ends.append(asyncio.get_running_loop().time())
        return {"version": self.version, "tokens": tokens, "samples": len(samples)}

    async def skip(self) -> None:
        self.steps += 1
        self.step_ends.append(asyncio.get_running_loop().time())

    def state_dict_for_engine(self) -> dict[str, Any]:
        return {}  # the trainer publishes its deltas itself (as the Ray trainer actor does)

    def set_data_state(self, state: dict[str, Any]) -> None:
        pass

    def save(self, path: Path) -> Path:
        return path
