"""A session's signals become one reward, and one acceptance trial for live figures.

Signals are `{kind, value, at}` (docs/architecture.md, "Session record"). The newest signal of each
kind counts (a user who changes a rating changes it); its value times the kind's weight in
`RewardConfig.weights` is summed and clipped. A session none of whose signal kinds has a weight
has no reward: it is not rated (a user who never answered) and is never trained on.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from inhabit.online.config import RewardConfig


@dataclass(frozen=True)
class Signal:
    kind: str
    value: float
    at: float
    note: str | None = None
    source: str = "user"


def newest_by_kind(signals: Iterable[Signal]) -> dict[str, Signal]:
    out: dict[str, Signal] = {}
    for s in sorted(signals, key=lambda s: s.at):
        out[s.kind] = s
    return out


def reward_of(signals: Iterable[Signal], config: RewardConfig) -> float | None:
    """The session's reward, or None when no signal of a weighted kind exists."""
    newest = newest_by_kind(signals)
    parts = [config.weights[k] * s.value for k, s in newest.items() if k in config.weights]
    if not parts:
        return None
    return min(config.max_reward, max(config.min_reward, sum(parts)))


def accepted_of(signals: Iterable[Signal], config: RewardConfig) -> bool | None:
    """Whether the session counts as accepted (None: no acceptance signal; a rating stands in)."""
    newest = newest_by_kind(signals)
    decisive = [s for k, s in newest.items() if k in config.accept_kinds]
    if decisive:
        last = max(decisive, key=lambda s: s.at)
        return config.accept_kinds[last.kind]
    if "rating" in newest:
        return newest["rating"].value > 0
    return None
