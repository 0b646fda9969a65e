"""Benchmark the RL pipeline: asynchronous versus synchronous on the quickstart workload.

Both modes run the same parts (quickstart tasks, the bootstrapped quickstart model, the embedded
engine, the real harness, sandboxes and grading) for the same number of trainer steps, with the
trainer in a child process pinned to one core and the rollout side (engine, harness, the
sandboxes it starts) pinned to another, one torch thread each: disaggregated hardware in
miniature. Sync generates a step's groups, then trains on them; async keeps generating while the
trainer trains (max_staleness 2). Reported per mode: trajectories per minute, trainer idle
fraction, mean reward of the last third of the steps. Goal: async >= 1.7x sync throughput with no
loss in reward.

    .venv/bin/python bench/pipeline.py [--steps 12] [--model FOLDER] [overrides, e.g. rollout.tasks_per_step=2]

The first run builds the quickstart tasks and bootstrap model into runs/bench-pipeline/cache
(minutes); later runs reuse them. Prints a rich table and writes bench/results/pipeline.json.
Wall times on a shared machine are noisy: run it on a quiet one, and read the load it prints.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.config import load_config
from inhabit.observability.progress import RunDisplay
from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.prepare import prepare
from inhabit.orchestrator.run import train
from inhabit.sandbox import create_provider


def cpu_busy_s() -> dict[int, float]:
    """Busy (non-idle, non-iowait) seconds of each CPU since boot, from /proc/stat."""
    tick = os.sysconf("SC_CLK_TCK")
    busy: dict[int, float] = {}
    for line in Path("/proc/stat").read_text().splitlines():
        name, *fields = line.split()
        if name.startswith("cpu") and name != "cpu":
            v = [int(x) for x in fields]
            busy[int(name[3:])] = (sum(v[:8]) - v[3] - v[4]) / tick
    return busy


def run_mode(base: RunConfig, mode: str, model_dir: Path, root: Path, steps: int, cpus: list[int]) -> dict:
    trainer_cpus, rollout_cpus = ([cpus[-1]], [cpus[0]]) if len(cpus) >= 2 else (None, None)
    data = base.model_dump()
    data["model"] = {"path": str(model_dir), "tokenizer": base.model.tokenizer}
    data |= {"mode": mode, "steps": steps, "run_dir": str(root / mode), "threads": 1}
    data["eval"] = {"before": False, "after": False}
    data["metrics"] = {"tensorboard": False, "progress": "plain"}
    data["placement"] = {
        "trainer": "process",
        "trainer_cpus": trainer_cpus,
        "trainer_threads": 1,
        "rollout_cpus": rollout_cpus,
    }
    cfg = RunConfig.model_validate(data)
    t0 = time.monotonic()
    busy0 = cpu_busy_s()
    summary = train(cfg, display=RunDisplay("plain", steps))
    busy1 = cpu_busy_s()
    hist = summary["history"]
    rl_s = summary["rl_s"]
    n_traj = sum(r["rollouts"] for r in hist)
    tail = hist[-max(1, len(hist) // 3) :]
    return {
        "mode": mode,
        "steps": len(hist),
        "rl_s": rl_s,
        "trajectories": n_traj,
        "trajectories_per_min": n_traj / rl_s * 60,
        "trainer_idle_fraction": hist[-1]["trainer_idle_fraction"],
        "final_reward": sum(r["reward"]["mean"] for r in tail) / len(tail),
        "reward_first": hist[0]["reward"]["mean"],
        "lag_max": max(r["policy_version_lag"]["max"] for r in hist),
        "train_s": sum(r.get("train_s", 0.0) for r in hist),
        "dropped_stale": summary["dropped_stale"],
        # Rows per decode step of the embedded engine (per-step means, averaged): on a CPU engine
        # whose step cost is mostly fixed overhead, a smaller batch costs more CPU per token.
        "decode_batch_mean": sum(r.get("engine_decode_batch_mean", 0.0) for r in hist) / len(hist),
        "wall_s": time.monotonic() - t0,
        # CPU seconds spent on each core during the run (rollout core first): tells a slower mode
        # that does more work per trajectory from one that leaves a core idle.
        "cpu_busy_s": {
            str(c): busy1.get(c, 0.0) - busy0.get(c, 0.0) for c in (rollout_cpus or []) + (trainer_cpus or [])
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/quickstart.toml")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--run-dir", default="runs/bench-pipeline")
    ap.add_argument("--model", default=None, help="a model folder to start from (skips the bootstrap)")
    ap.add_argument("overrides", nargs="*", help="dotted overrides for the config")
    args = ap.parse_args()
    base = load_config(
        RunConfig, args.config, [*args.overrides, f"run_dir={args.run_dir}", "max_staleness=2"]
    )
    console = Console()
    root = Path(args.run_dir)
    if args.model:
        base = base.model_copy(
            update={"model": base.model.model_copy(update={"path": args.model, "spec": None})}
        )
    prepared = prepare(base, create_provider(base.sandbox), lambda s: console.print(s, highlight=False))
    # Read once, before either run: the CPU set is the machine's to split, whatever a run does.
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        console.print(f"[yellow]only CPU(s) {cpus} available: trainer and rollouts will share them[/]")
    load0 = os.getloadavg()
    results = {m: run_mode(base, m, prepared.model_dir, root, args.steps, cpus) for m in ("sync", "async")}
    load1 = os.getloadavg()
    ratio = results["async"]["trajectories_per_min"] / results["sync"]["trajectories_per_min"]
    reward_ok = results["async"]["final_reward"] >= results["sync"]["final_reward"] - 0.05
    table = Table(title=f"pipeline: async vs sync, {args.steps} steps, trainer and rollouts on one core each")
    cols = (
        "mode",
        "traj/min",
        "trainer idle",
        "final reward",
        "max lag",
        "dropped stale",
        "RL s",
        "decode batch",
        "CPU s/traj (rollout, trainer)",
    )
    for col in cols:
        table.add_column(col, justify="right")
    for r in results.values():
        table.add_row(
            r["mode"], f"{r['trajectories_per_min']:.1f}", f"{r['trainer_idle_fraction']:.0%}",
            f"{r['final_reward']:.3f}", str(r["lag_max"]), str(r["dropped_stale"]), f"{r['rl_s']:.0f}",
            f"{r['decode_batch_mean']:.1f}", ", ".join(f"{v / max(1, r['trajectories']):.3f}" for v in r["cpu_busy_s"].values()),
        )  # fmt: skip
    console.print(table)
    # What overlap alone can give: sync spends G generating and T training per run; a perfect
    # overlap takes max(G, T). Async can beat this ceiling only by also keeping the engine's batch
    # full across step boundaries (sync drains it at the end of every step).
    sync = results["sync"]
    t_train = sync["train_s"]
    t_gen = max(sync["rl_s"] - t_train, 1e-9)
    ceiling = (t_gen + t_train) / max(t_gen, t_train)
    console.print(
        f"sync split: generation {t_gen:.0f} s, training {t_train:.0f} s -> overlap ceiling {ceiling:.2f}x"
    )
    met = ratio >= 1.7 and reward_ok
    console.print(
        f"async / sync throughput: {ratio:.2f}x (goal >= 1.7x), reward "
        f"{'kept' if reward_ok else 'LOST'}: goal {'MET' if met else 'NOT met'}; load {load0[0]:.1f} -> {load1[0]:.1f}"
    )
    out = Path("bench/results/pipeline.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"results": results, "ratio": ratio, "reward_kept": reward_ok, "goal_met": met,
                               "loadavg_before": load0, "loadavg_after": load1, "steps": args.steps,
                               "sync_generation_s": t_gen, "sync_train_s": t_train, "overlap_ceiling": ceiling}, indent=2))  # fmt: skip
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
