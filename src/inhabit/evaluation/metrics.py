"""Evaluation metrics: pass@k (the unbiased estimator of Chen et al. 2021) and the summary of a set
of per-sample records.

pass@k for one task with n samples of which c succeeded is 1 - C(n-c, k) / C(n, k): the chance that
at least one of k samples drawn without replacement from the n succeeds. It is computed as a
product (no huge binomials) and is only defined for k <= n; the summary averages it over tasks.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from typing import Any

__all__ = ["EvalRecord", "pass_at_k", "summarize"]

EvalRecord = dict[str, Any]
"""One finished (task, sample): task_id, sample, reward, success, status, turns, completion_tokens,
prompt_tokens, flags, error, seconds."""


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for n samples with c successes (1 - C(n-c,k)/C(n,k))."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass@k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def _cause(rec: EvalRecord) -> str:
    if rec["success"]:
        return "success"
    if rec["status"] == "finished":
        return "tests_failed"
    return rec["status"]


def summarize(records: Iterable[EvalRecord], *, k: int | None = None) -> dict[str, Any]:
    """Aggregate records: success rate, pass@1 and pass@k (k = the fewest samples of any task unless
    given), mean turns and tokens, hack flags and outcomes by cause."""
    recs = list(records)
    by_task: dict[str, list[EvalRecord]] = defaultdict(list)
    for r in recs:
        by_task[r["task_id"]].append(r)
    n_min = min((len(v) for v in by_task.values()), default=0)
    k = k or n_min
    out: dict[str, Any] = {
        "tasks": len(by_task),
        "samples": len(recs),
        "success_rate": sum(r["success"] for r in recs) / len(recs) if recs else 0.0,
        "pass@1": None,
        "k": k,
        f"pass@{k}": None,
        "mean_turns": sum(r["turns"] for r in recs) / len(recs) if recs else 0.0,
        "mean_completion_tokens": sum(r["completion_tokens"] for r in recs) / len(recs) if recs else 0.0,
        "mean_reward": sum(r["reward"] or 0.0 for r in recs) / len(recs) if recs else 0.0,
        "flags": dict(Counter(f for r in recs for f in r["flags"]).most_common()),
        "samples_flagged": sum(1 for r in recs if r["flags"]),
        "causes": dict(Counter(_cause(r) for r in recs).most_common()),
        "per_task": {},
    }
    composed = [r["composed_reward"] for r in recs if r.get("composed_reward") is not None]
    if composed:
        out["mean_composed_reward"] = sum(composed) / len(composed)
        names = sorted({k for r in recs for k in r.get("reward_parts", {})})
        out["reward_parts"] = {}
        for name in names:
            vals = [r["reward_parts"].get(name) for r in recs if "reward_parts" in r]
            have = [v for v in vals if v is not None]
            out["reward_parts"][name] = {"mean": sum(have) / len(have) if have else None,
                                         "missing": len(vals) - len(have)}  # fmt: skip
    if by_task:
        p1, pk = [], []
        for task_id, rs in sorted(by_task.items()):
            n, c = len(rs), sum(r["success"] for r in rs)
            p1.append(pass_at_k(n, c, 1))
            if k <= n_min and k >= 1:
                pk.append(pass_at_k(n, c, k))
            out["per_task"][task_id] = {"n": n, "c": c}
        out["pass@1"] = sum(p1) / len(p1)
        out[f"pass@{k}"] = sum(pk) / len(pk) if pk else None
    return out
