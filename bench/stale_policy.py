"""What the staleness bound's policy does to learning: drop vs in-flight vs partial, one workload.

One bootstrap (a `steps=0` run that also evaluates the start on the held-out split), then one RL
run per `stale_policy` from that same model (every run folder's `cache/` is the bootstrap run's),
same seed, same steps, each evaluated on the held-out split at its end. Printed per policy: held-out
success before and after, mean train reward of the last half of the steps, the trainer's mismatch
(mean |trainer - engine| logprob of the trained tokens), the version lag trained, groups dropped
whole by the bound, tokens it took out of the loss, partial pauses and the run's RL wall time; and
the train reward, mismatch and tokens out of the loss per step. Writes the table as JSON.

    .venv/bin/python bench/stale_policy.py --config configs/quickstart.toml --steps 10 \\
        [--policies drop,inflight,partial] [--root runs/stale-policy] [overrides...]

The overrides (dotted, as `inhabit train` takes them) apply to the bootstrap and to every run.
Each run is a child `inhabit train` process; its log is `<root>/<name>.log`. A run that finished
(its `wall_s.txt` written) is read back, not run again, so an interrupted comparison resumes.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def _train(config: str, run_dir: Path, overrides: list[str], log: Path) -> float:
    """One `inhabit train` in a child process; its wall seconds. Exits with the log's tail on failure."""
    cmd = [sys.executable, "-m", "inhabit", "train", config, f"run_dir={run_dir}", "metrics.progress=plain"]
    t0 = time.monotonic()
    with log.open("w") as out:
        rc = subprocess.call(cmd + overrides, stdout=out, stderr=subprocess.STDOUT, env=os.environ.copy())
    if rc != 0:
        sys.exit(
            f"{run_dir.name} failed (exit {rc}); last lines of {log}:\n"
            + "".join(log.open().readlines()[-15:])
        )
    return time.monotonic() - t0


def _steps(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if "trainer" in r or "groups" in r]


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def summarize(run_dir: Path, wall_s: float) -> dict:
    """The figures of one policy's run (module docstring); `rl_wall_s` is the RL part (the run's
    `rl_s`), `run_wall_s` the whole child process (evaluation and start-up included)."""
    steps = _steps(run_dir)
    after = json.loads((run_dir / "eval.json").read_text())["after"]
    tail = steps[len(steps) // 2 :]
    trained = [s["trainer"] for s in steps if s.get("trainer")]
    last = steps[-1] if steps else {}
    return {
        "held_out_after": after["success_rate"],
        "train_reward_last_half": _mean([s["reward"]["mean"] for s in tail if "reward" in s]),
        "mismatch_mean_abs": _mean([t["mismatch_mean_abs"] for t in trained if "mismatch_mean_abs" in t]),
        "lag_mean": _mean([s["policy_version_lag"]["mean"] for s in steps]),
        "groups_dropped": last.get("groups", {}).get("dropped_stale_total", 0),
        "tokens_out_of_loss": sum(s.get("stale_tokens_masked", 0) for s in steps),
        "completion_tokens": sum(s.get("completion_tokens", 0) for s in steps),
        "pauses": last.get("partial_pauses_total", 0),
        "rl_wall_s": json.loads((run_dir / "summary.json").read_text())["rl_s"],
        "run_wall_s": wall_s,
        "per_step": [
            {
                "step": s.get("step"),
                "reward": s.get("reward", {}).get("mean"),
                "mismatch": (s.get("trainer") or {}).get("mismatch_mean_abs"),
                "tokens_out_of_loss": s.get("stale_tokens_masked", 0),
                "lag_max": s["policy_version_lag"]["max"],
            }
            for s in steps
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default="configs/quickstart.toml")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--policies", default="drop,inflight,partial")
    ap.add_argument("--root", default="runs/stale-policy")
    ap.add_argument("--out", default=None, help="JSON out (default <root>/stale_policy.json)")
    ap.add_argument("overrides", nargs="*", help="dotted overrides for every run")
    args = ap.parse_args()
    console = Console()
    root = Path(args.root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    prep = root / "bootstrap"
    if not (prep / "eval.json").exists():
        console.print(f"bootstrap and held-out evaluation of the start: {prep}")
        wall = _train(
            args.config,
            prep,
            ["steps=0", "eval.before=true", "eval.after=false", *args.overrides],
            root / "bootstrap.log",
        )
        console.print(f"  {wall:.0f} s")
    before = json.loads((prep / "eval.json").read_text())["before"]["success_rate"]
    results: dict[str, dict] = {}
    for policy in args.policies.split(","):
        run_dir = root / policy
        run_dir.mkdir(exist_ok=True)
        if not (run_dir / "cache").exists():
            (run_dir / "cache").symlink_to(prep / "cache")
        extra = [f"stale_policy={policy}", f"steps={args.steps}", "eval.before=false", "eval.after=true"]
        done = run_dir / "wall_s.txt"
        if done.exists() and (run_dir / "eval.json").exists():  # finished by an earlier invocation
            wall = float(done.read_text())
        else:
            console.print(f"{policy}: {args.steps} steps")
            wall = _train(args.config, run_dir, [*args.overrides, *extra], root / f"{policy}.log")
            done.write_text(f"{wall:.1f}")
        results[policy] = summarize(run_dir, wall)
        console.print(f"  {wall:.0f} s, held-out after {results[policy]['held_out_after']:.3f}")
    table = Table(title=f"{args.config}: held-out success before {before:.3f}")
    cols = [
        "policy",
        "held-out after",
        "train reward (last half)",
        "mismatch",
        "lag mean",
        "groups dropped",
        "tokens out of loss",
        "pauses",
        "RL wall s",
    ]
    for c in cols:
        table.add_column(c)
    for policy, r in results.items():
        table.add_row(
            policy,
            f"{r['held_out_after']:.3f}",
            f"{r['train_reward_last_half']:.3f}",
            f"{r['mismatch_mean_abs']:.2e}" if r["mismatch_mean_abs"] is not None else "-",
            f"{r['lag_mean']:.2f}",
            str(r["groups_dropped"]),
            f"{r['tokens_out_of_loss']} / {r['completion_tokens']}",
            str(r["pauses"]),
            f"{r['rl_wall_s']:.0f}",
        )
    console.print(table)
    out = Path(args.out) if args.out else root / "stale_policy.json"
    out.write_text(
        json.dumps(
            {
                "config": args.config,
                "overrides": args.overrides,
                "steps": args.steps,
                "held_out_before": before,
                "policies": results,
            },
            indent=1,
        )
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
