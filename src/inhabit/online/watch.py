"""Live figures: acceptance of each version from its users' signals, and the comparison that decides
a rollback.

A session belongs to the newest policy version among its tokens; its acceptance trial comes from
`rewards.accepted_of` (accepted/rejected, or a rating). The new version is compared with its
parent by the difference of acceptance rates with an Agresti-Caffo interval (add one success and one
failure to each side; a Wald interval on the adjusted rates), which keeps its coverage at the small
counts an early version has. The new version is rolled back when the whole interval lies below 0.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

from inhabit.online.config import RewardConfig
from inhabit.online.rewards import accepted_of
from inhabit.online.store import SessionRow


def acceptance(rows: list[SessionRow], rewards: RewardConfig) -> dict[int, tuple[int, int]]:
    """version -> (accepted, trials)."""
    out: dict[int, tuple[int, int]] = {}
    for r in rows:
        if r.version is None:
            continue
        ok = accepted_of(r.signals, rewards)
        if ok is None:
            continue
        a, n = out.get(r.version, (0, 0))
        out[r.version] = (a + int(ok), n + 1)
    return out


def diff_interval(new: tuple[int, int], old: tuple[int, int], confidence: float) -> tuple[float, float]:
    """Agresti-Caffo interval of p_new - p_old."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    (a1, n1), (a0, n0) = new, old
    p1, p0 = (a1 + 1) / (n1 + 2), (a0 + 1) / (n0 + 2)
    se = math.sqrt(p1 * (1 - p1) / (n1 + 2) + p0 * (1 - p0) / (n0 + 2))
    d = p1 - p0
    return d - z * se, d + z * se


def live_figures(new: tuple[int, int], old: tuple[int, int] | None, confidence: float) -> dict[str, Any]:
    out: dict[str, Any] = {"accepted": new[0], "trials": new[1], "rate": new[0] / new[1] if new[1] else None}
    if old is not None and old[1] and new[1]:
        out["parent_accepted"], out["parent_trials"] = old
        out["diff_ci"] = list(diff_interval(new, old, confidence))
    return out
