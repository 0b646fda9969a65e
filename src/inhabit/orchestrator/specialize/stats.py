"""The figures a before / after claim rests on: success rates with Wilson intervals, and a paired
bootstrap interval on the difference (resampling held-out TASKS, the unit that varies: samples of
one task are not independent), and the verdict that refuses to call a result better when the
interval holds 0.

Both evaluations run the same tasks with the same number of samples, so the difference is paired
by task: each resample draws tasks with replacement and takes the mean of (after - before) of
their per-task success rates. The interval is the resamples' 5th and 95th percentiles (90%).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

__all__ = ["MIN_TASKS", "Z90", "difference_interval", "per_task_rates", "verdict", "wilson"]

Z90 = 1.6448536269514722
"""The standard normal quantile of 95%: a two-sided 90% interval."""


def wilson(successes: int, n: int, z: float = Z90) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (sensible at 0 and n, unlike the normal one)."""
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def per_task_rates(records: Iterable[dict[str, Any]]) -> dict[str, float]:
    """Task id -> share of its samples that succeeded."""
    by_task: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        by_task[r["task_id"]].append(bool(r["success"]))
    return {t: sum(v) / len(v) for t, v in by_task.items()}


def difference_interval(
    before: dict[str, float],
    after: dict[str, float],
    *,
    resamples: int = 4000,
    seed: int = 0,
    level: float = 0.9,
) -> dict[str, Any]:
    """Mean paired difference (after - before) over the tasks both hold, and its bootstrap interval."""
    tasks = sorted(set(before) & set(after))
    if not tasks:
        return {"tasks": 0, "difference": 0.0, "low": -1.0, "high": 1.0, "level": level}
    diffs = [after[t] - before[t] for t in tasks]
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples))
    tail = (1 - level) / 2
    low = means[math.floor(tail * (resamples - 1))]
    high = means[math.ceil((1 - tail) * (resamples - 1))]
    return {"tasks": n, "difference": sum(diffs) / n, "low": low, "high": high, "level": level}


MIN_TASKS = 5
"""Fewer held-out tasks than this: a bootstrap over so few cannot tell a change from luck."""


def verdict(interval: dict[str, Any]) -> str:
    """ "better" only when the whole interval lies above 0, "worse" when below, else "no measurable
    change" (the interval holds 0: the data cannot tell the two models apart); "too few held-out
    tasks" below `MIN_TASKS`, whatever the interval says."""
    if interval["tasks"] == 0:
        return "not measured"
    if interval["tasks"] < MIN_TASKS:
        return "too few held-out tasks"
    if interval["low"] > 0:
        return "better"
    if interval["high"] < 0:
        return "worse"
    return "no measurable change"
