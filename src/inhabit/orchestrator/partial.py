"""Partial rollouts (`stale_policy = "partial"`): a rollout that grows old is paused and resumed on
current weights instead of being thrown away.

    gate = VersionGate()                                  # the pipeline's: published and applied versions
    policy = PartialPolicy(policy, engine, gate, age=1)   # wraps one episode's policy

Between two turns (never inside one: a turn is one engine request, which the engine itself moves
onto new weights between decode steps), `PartialPolicy` measures the rollout's age: the newest
published version minus the oldest version that generated a token since its last resume. Past
`age` versions it pauses until its engine holds the newest published version, then resumes: the
prefix (every turn so far) is kept, and becomes the prompt of the next turn, whose KV the engine
computes with the weights it now holds (a new request is prefilled afresh, or served from a
prefix cache as `engine.kv_after_swap` says for requests spanning a swap). The prefix's tokens keep
the versions and logprobs they were sampled with; the trainer's per-token bound
(`trainer.samples.bound_tokens`) takes those that fell out of the bound out of the loss, and
truncated importance sampling corrects the rest. So a slow rollout costs its stale tokens at most,
never its group: no group is generated twice because one member was slow.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from inhabit.contracts import Message, Policy, PolicyTurn

RECHECK_S = 1.0
"""How often a paused rollout looks at its engine's version without being woken."""


class VersionGate:
    """The newest published policy version, and a way to wait until an engine holds it."""

    def __init__(self, published: int = 0) -> None:
        self.published = published
        self.pauses = 0
        """Rollouts paused and resumed so far (every `PartialPolicy` on this gate)."""
        self._cond = asyncio.Condition()

    async def advance(self, published: int) -> None:
        """A version was published and (maybe) applied: wake the paused rollouts to look again."""
        async with self._cond:
            self.published = max(self.published, published)
            self._cond.notify_all()

    async def wait_current(self, engine: Any) -> None:
        """Until `engine` holds the newest published version (engines without a version: at once)."""
        if not hasattr(engine, "version"):
            return
        async with self._cond:
            while engine.version < self.published:
                # Woken by `advance`; the timeout re-checks an engine that caught up on its own (a
                # restarted engine comes back with the newest weights without a publish).
                try:
                    await asyncio.wait_for(self._cond.wait(), RECHECK_S)
                except TimeoutError:
                    pass


class PartialPolicy(Policy):
    """An episode's policy, paused at a turn boundary once the rollout is `age` versions old
    (module docstring). `pauses` counts the resumes; `paused_s` the loop time spent paused."""

    def __init__(self, inner: Policy, engine: Any, gate: VersionGate, *, age: int) -> None:
        self.inner, self.engine, self.gate, self.age = inner, engine, gate, age
        self.context_window = inner.context_window
        self.anchor: int | None = None
        """Oldest version that generated a token since the last resume (None: none yet)."""
        self.pauses = 0
        self.paused_s = 0.0

    def native_tools(self) -> bool | None:
        return self.inner.native_tools()

    def count_tokens(self, messages: Sequence[Message]) -> int:
        return self.inner.count_tokens(messages)

    async def close(self) -> None:
        await self.inner.close()

    async def next_turn(self, messages: Sequence[Message], **kwargs: Any) -> PolicyTurn:
        if self.anchor is not None and self.gate.published - self.anchor >= self.age:
            loop = asyncio.get_running_loop()
            t0 = loop.time()
            await self.gate.wait_current(self.engine)
            self.paused_s += loop.time() - t0
            self.pauses += 1
            self.gate.pauses += 1
            self.anchor = None  # resumed: the age counts from the tokens generated from here on
        turn = await self.inner.next_turn(messages, **kwargs)
        known = [v for v in turn.versions or () if v >= 0]
        if known:
            oldest = min(known)
            self.anchor = oldest if self.anchor is None else min(self.anchor, oldest)
        return turn
