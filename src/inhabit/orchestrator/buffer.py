"""Completed rollout groups waiting for the trainer, with the hard staleness bound.

A group is the G rollouts of one task. Its age is measured in policy versions: `min_version` is the
oldest version that generated any of its tokens (the engine stamps every token). When the trainer
(about to train at version `v`) takes groups, every buffered group with
`v - min_version > max_staleness` is dropped there and then and counted; so no token older than
the bound ever reaches the optimizer, whatever order generation, completion and training happen
in (tests/unit/orchestrator/test_buffer.py checks this with hypothesis over schedules).

The producer side keeps drops rare rather than making them impossible: `may_start` admits a new
group only while fewer than `(max_staleness + 1) * tasks_per_step` groups are outstanding (in
flight, buffered, or taken by the trainer for the step it is assembling or training: `held`, until
`step_done`), so a group started now is consumed within `max_staleness` further steps. Without
`held`, a group started while the trainer trains version v (the engine still at v) would be the
last of `max_staleness + 1` steps' worth counted from v + 1: one version past the bound, dropped,
and generated again while the trainer waits. `take` hands out the groups of the oldest policy first
(earliest deadline first; completion order among equals), so a group that finished late is not
passed over by fresher ones until it is too old.
Dropped groups' tasks are handed back (`pop_requeued`) to be generated again with fresh weights.
With `drop_stale=False` (`stale_policy` "inflight" and "partial") nothing is dropped here: the
pipeline applies the bound per token instead (`trainer.samples.bound_tokens`), so a group is never
generated twice because one member was slow; the admission rule above still paces the producer.
With `rollout.waves` the producer starts groups in waves instead (`wave_room`): a step's worth
together once none is in flight, so the engine decodes their episodes in one batch.
"""

from __future__ import annotations

import collections

from inhabit.contracts import Group
from inhabit.tasks.task import Task


def completion_tokens(group: Group) -> int:
    """Tokens the engines generated for a group's kept rollouts."""
    return sum(t.completion_tokens or 0 for tr in group.trajectories for s in tr.segments for t in s.turns)


class GroupBuffer:
    """FIFO of completed groups; `take` enforces `max_staleness` (see module docstring)."""

    def __init__(self, max_staleness: int, tasks_per_step: int = 1, *, drop_stale: bool = True) -> None:
        assert max_staleness >= 0 and tasks_per_step >= 1
        self.max_staleness = max_staleness
        self.drop_stale = drop_stale
        self.tasks_per_step = tasks_per_step
        self._ready: collections.deque[Group] = collections.deque()
        self.in_flight = 0
        self.held = 0
        """Groups the trainer has taken for the step it is assembling or training (`step_done` ends it)."""
        self.dropped_stale = 0
        self.dropped_tokens = 0
        """Completion tokens of the dropped groups: engine work that trained nothing."""
        self.regenerated = 0
        """Dropped groups' tasks handed back to be generated again."""
        self._requeue: collections.deque[Task] = collections.deque()

    # producer side
    def may_start(self) -> bool:
        """Whether one more group may start now without (normally) outliving the bound."""
        return self.room() > 0

    def room(self) -> int:
        """How many groups may start now under the bound (`may_start` is `room() > 0`)."""
        outstanding = self.in_flight + len(self._ready) + self.held
        return max(0, (self.max_staleness + 1) * self.tasks_per_step - outstanding)

    def wave_room(self) -> int:
        """Groups one wave may start now: none while a group is in flight, else up to a step's worth
        (`tasks_per_step`) under the bound."""
        return 0 if self.in_flight else min(self.tasks_per_step, self.room())

    def started(self) -> None:
        self.in_flight += 1

    def put(self, group: Group) -> None:
        """A started group completed (also for groups whose rollouts all failed)."""
        assert self.in_flight > 0, "put() without started()"
        self.in_flight -= 1
        self._ready.append(group)

    def abandon(self) -> None:
        """A started group will never be put (its generation was cancelled)."""
        assert self.in_flight > 0
        self.in_flight -= 1

    # consumer side
    def __len__(self) -> int:
        return len(self._ready)

    def evict_stale(self, trainer_version: int) -> list[Group]:
        """Drop every buffered group too old for a trainer at `trainer_version`; return them
        (none with `drop_stale=False`)."""
        if not self.drop_stale:
            return []
        keep: collections.deque[Group] = collections.deque()
        dropped = []
        for g in self._ready:
            if trainer_version - g.min_version > self.max_staleness:
                dropped.append(g)
            else:
                keep.append(g)
        self._ready = keep
        self.dropped_stale += len(dropped)
        self.dropped_tokens += sum(completion_tokens(g) for g in dropped)
        self._requeue += [g.task for g in dropped if g.task is not None]
        return dropped

    def take(self, n: int, trainer_version: int) -> list[Group]:
        """Up to `n` groups that a trainer at `trainer_version` may train on (stale ones dropped),
        those of the oldest policy first; they count as `held` until `step_done`."""
        self.evict_stale(trainer_version)
        ready = list(self._ready)
        chosen = sorted(range(len(ready)), key=lambda i: (ready[i].min_version, i))[:n]
        out = [ready[i] for i in chosen]
        taken = set(chosen)
        self._ready = collections.deque(g for i, g in enumerate(ready) if i not in taken)
        self.held += len(out)
        return out

    def step_done(self) -> None:
        """The trainer has trained (and published) the step whose groups it took."""
        self.held = 0

    def pop_requeued(self) -> Task | None:
        """The oldest task of a dropped group, to generate again (None: none waiting)."""
        if not self._requeue:
            return None
        self.regenerated += 1
        return self._requeue.popleft()
