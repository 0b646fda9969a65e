"""Benchmark the scheduling code at scale: the real pipeline, buffer, dispatch and weight sync
driving 8, 64 and 1,000 simulated engines and 1k-100k sandboxes on virtual time (docs/scale.md).

Every scenario is configs/scale.toml with one or two things changed: engines and sandboxes,
light or heavy tails, max_staleness 0/1/2/4, oversampling with a deadline, one or four
clusters, faults. Per scenario: engine utilization (busy share) and mean decode batch, trainer
idle share, rollouts per hour, staleness of trained samples, share lost to deadlines, weight-sync
bytes per cluster and pause per engine per version, and the control plane's CPU per rollout with
its ratio to the 8-engine scenario measured in the same process (the baseline).

Goals, read on the 1,000-engine / 100k-sandbox row (heavy tails, max_staleness 2): >= 90% engine
utilization, <= 5% wasted engine work (tokens the staleness bound dropped or took out of the loss),
control-plane CPU per rollout at most 1.2x the 8-engine / 1k-sandbox row's. Each prints met, not
met or not measured. `--stale-policy` and `--fleet-steps` set every scenario's (the rows named
"fleet_steps" keep theirs): the wasted share follows how long a version lasts against a group's
life, which fleet_steps sets (docs/scale.md).

Validation: `inhabit scale calibrate` fits a scenario to examples/recorded-run (a quickstart-sized
run recorded here earlier, one engine) and predicts a fresh real run of the same configuration
with `--replicas` embedded engines (default 2; `--real-run DIR`, or without it the bench runs
one, ~6 min; `--quick` skips it unless given), and the
scenario fitted to the real run itself predicts it too. Both are reported against the measured
rollouts/min and trainer idle share (goal: within 15%).

    .venv/bin/python bench/scale.py [--quick] [--real-run DIR] [--seeds 3] [--rows NAME...]
        [--stale-policy drop|inflight|partial] [--fleet-steps F]

Prints rich tables and writes bench/results/scale.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from inhabit.config import load_config
from inhabit.orchestrator.scale.calibrate import calibrate
from inhabit.orchestrator.scale.config import ScaleConfig
from inhabit.orchestrator.scale.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
BASE = ROOT / "configs" / "scale.toml"
RECORDED = ROOT / "examples" / "recorded-run"
# The real run the validation predicts: the configuration examples/recorded-run was made with.
REAL_OVERRIDES = [
    "tasks.count=48", "tasks.held_out=8", "model.bootstrap.steps=500", "rollout.group_size=4",
    "rollout.tasks_per_step=2", "steps=12", "eval.before=false", "eval.after=false",
    "metrics.tensorboard=false", "metrics.progress=plain",
]  # fmt: skip

LIGHT = {
    "turns": {"kind": "lognormal", "median": 8, "sigma": 0.3, "cap": 64},
    "exec_s": {"kind": "lognormal", "median": 1.0, "sigma": 0.5},
    "grade_s": {"kind": "lognormal", "median": 20, "sigma": 0.37},
}
FOUR_CLUSTERS = [
    {"share": 0.4, "link_gbps": 400, "relay": True},
    {"share": 0.3, "link_gbps": 100, "relay": True},
    {"share": 0.2, "link_gbps": 25, "relay": True},
    {"share": 0.1, "link_gbps": 10, "relay": False},
]
FAULTS = {
    "engine_crashes_per_engine_hour": 1.0,
    "env_server_losses_per_server_hour": 1.0,
    "slow_fraction": 0.1,
    "slow_factor": 3.0,
}


BASE_OVERRIDES: list[str] = []
"""Dotted overrides of configs/scale.toml for every scenario (--stale-policy, --fleet-steps)."""


def scenario(name: str, engines: int, sandboxes: int, **changes: Any) -> ScaleConfig:
    base = load_config(ScaleConfig, BASE, BASE_OVERRIDES).model_dump()
    base |= {"name": name, "engines": engines, "sandboxes": sandboxes, "tasks": max(1000, sandboxes)}
    for key, value in changes.items():
        if key == "episode":
            base["episode"] |= value
        elif key == "clusters":
            base["network"]["clusters"] = value
        else:
            base[key] = value
    return ScaleConfig.model_validate(base)


def grid(quick: bool) -> list[ScaleConfig]:
    out = [
        scenario("8 engines, base", 8, 1000),
        scenario("8, light tails", 8, 1000, episode=LIGHT),
        scenario("8, staleness 0", 8, 1000, max_staleness=0),
        scenario("8, oversample 2 + deadline 600 s", 8, 1000, oversample=2, deadline_s=600),
        scenario("8, four clusters", 8, 1000, clusters=FOUR_CLUSTERS),
        # how long a version lasts against a group's life: a step's worth of groups fills the
        # sandboxes (1) or twice over (0.5), instead of max_staleness + 1 steps' worth in flight
        scenario("8, fleet_steps 1", 8, 1000, fleet_steps=1),
        scenario("8, fleet_steps 0.5", 8, 1000, fleet_steps=0.5),
        scenario("1000 engines, 1k sandboxes", 1000, 1000),
        scenario("1000 engines, 10k sandboxes", 1000, 10_000),
    ]
    if quick:
        return out
    return [
        *out,
        scenario("8, staleness 1", 8, 1000, max_staleness=1),
        scenario("8, staleness 4", 8, 1000, max_staleness=4),
        scenario("64 engines, 10k sandboxes", 64, 10_000),
        scenario("64, light tails", 64, 10_000, episode=LIGHT),
        scenario("64, staleness 0", 64, 10_000, max_staleness=0),
        scenario("64, staleness 4", 64, 10_000, max_staleness=4),
        scenario("64, oversample 2 + deadline 600 s", 64, 10_000, oversample=2, deadline_s=600),
        scenario("64, four clusters", 64, 10_000, clusters=FOUR_CLUSTERS),
        scenario("64, faults x100", 64, 10_000, faults=FAULTS),
        scenario("64, fleet_steps 0.5", 64, 10_000, fleet_steps=0.5),
        scenario("1000 engines, 100k sandboxes (goal)", 1000, 100_000),
        scenario("1000, 10k, four clusters", 1000, 10_000, clusters=FOUR_CLUSTERS),
    ]


def real_run(out: Path, replicas: int) -> Path:
    """A fresh real run of the recorded run's configuration with `replicas` embedded engines (the
    validation's measurement)."""
    cmd = [sys.executable, "-m", "inhabit", "train", str(ROOT / "configs" / "quickstart.toml"),
           *REAL_OVERRIDES, f"engine.replicas={replicas}", f"run_dir={out}"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(cmd, check=True, env=env, cwd=ROOT)
    return out


def validate(run: Path, seeds: int) -> list[dict[str, Any]]:
    real_shape, measured = calibrate(run)
    rows = []
    for label, source in (
        ("fitted to examples/recorded-run", RECORDED),
        ("fitted to the real run itself", run),
    ):
        cfg, _ = calibrate(source)
        # The recorded run had one engine: its fitted parts predict the real run's engine count.
        cfg = cfg.model_copy(
            update={"measure_steps": real_shape.measure_steps, "engines": real_shape.engines}
        )
        sims = [simulate(cfg.model_copy(update={"seed": s})) for s in range(seeds)]
        row: dict[str, Any] = {"prediction": label}
        for key in ("rollouts_per_min", "trainer_idle"):
            pred = statistics.fmean(r[key] for r in sims)
            row[key] = {"simulated": pred, "measured": measured[key], "error": pred / measured[key] - 1}
        row["sim_seconds"] = statistics.fmean(r["simulated_s"] for r in sims)
        row["real_seconds"] = measured["elapsed_s"]
        rows.append(row)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="A subset without 64 engines and 100k sandboxes.")
    ap.add_argument("--real-run", type=Path, help="Folder of the real run to validate against.")
    ap.add_argument("--seeds", type=int, default=3, help="Simulations averaged per validation prediction.")
    ap.add_argument(
        "--replicas", type=int, default=2, help="Embedded engines of the real run the bench makes."
    )
    ap.add_argument("--rows", nargs="*", help="Only the scenarios whose name starts with one of these.")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale.json"))
    ap.add_argument(
        "--stale-policy", choices=["drop", "inflight", "partial"], help="Every scenario's stale_policy."
    )
    ap.add_argument(
        "--fleet-steps", type=float, help="Every scenario's fleet_steps (rows that set one keep it)."
    )
    args = ap.parse_args()
    if args.stale_policy:
        BASE_OVERRIDES.append(f"stale_policy={args.stale_policy}")
    if args.fleet_steps:
        BASE_OVERRIDES.append(f"fleet_steps={args.fleet_steps}")
    console = Console()
    results: dict[str, Any] = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "loadavg_start": os.getloadavg(),
    }
    rows = []
    scenarios = grid(args.quick)
    if args.rows:
        scenarios = [c for c in scenarios if any(c.name.startswith(p) for p in args.rows)]
    for cfg in scenarios:
        t0 = time.monotonic()
        r = simulate(cfg)
        console.print(f"{cfg.name}: {time.monotonic() - t0:.0f} s wall, {r['rollouts']} rollouts measured")
        rows.append(r)
    results["grid"] = rows
    base_cpu = rows[0]["cpu_ms_per_rollout"]
    policy = args.stale_policy or load_config(ScaleConfig, BASE).stale_policy
    t = Table(title=f"scale grid (configs/scale.toml varied, stale_policy {policy}; virtual time)")
    for col in ("scenario", "engines", "sandboxes", "stale", "util", "batch", "trainer idle", "rollouts/h",
                "staleness 0/1/2/..", "deadline lost", "stale-dropped", "regenerated", "resumed", "wasted", "sync MB/cluster/v", "pause/engine",
                "CPU ms/rollout", "x 8-engine"):  # fmt: skip
        t.add_column(col, justify="left" if col == "scenario" else "right")
    for r in rows:
        t.add_row(
            r["name"], str(r["engines"]), f"{r['sandboxes']:,}", str(r["max_staleness"]),
            f"{r['engine_utilization']:.1%}", f"{r['mean_batch']:.0f}", f"{r['trainer_idle']:.0%}",
            f"{r['rollouts_per_hour']:,.0f}", "/".join(f"{v:.2f}" for v in r["staleness"].values()),
            f"{r['lost_to_deadline']:.1%}", str(r["dropped_stale_groups"]), str(r["groups_regenerated"]),
            str(r["resumed"]), f"{r['wasted_share']:.0%}",
            ",".join(f"{b / 1e6:.0f}" for b in r["sync_bytes_per_cluster_per_version"]),
            f"{r['swap_pause_per_engine_s']:.2f}s", f"{r['cpu_ms_per_rollout']:.2f}",
            f"{r['cpu_ms_per_rollout'] / base_cpu:.2f}x",
        )  # fmt: skip
    console.print(t)

    # The fleet goals are read on the 1000-engine, 100k-sandbox row (heavy tails, staleness 2); the
    # control-plane goal compares its CPU per rollout with the 8-engine, 1k-sandbox base of the same
    # process. A goal whose row was not run prints "not measured", never "not met".
    results["goals"] = {}
    goal_row = next((r for r in rows if r["engines"] == 1000 and r["sandboxes"] == 100_000), None)
    base_row = rows[0] if rows and rows[0]["engines"] == 8 else None

    def say(name: str, text: str, met: bool | None, value: float | None) -> None:
        verdict = "not measured" if met is None else ("met" if met else "NOT met")
        results["goals"][name] = {"value": value, "met": met}
        console.print(f"goal {text}: {verdict}")

    if goal_row is None:
        say("utilization", ">= 90% engine utilization at 1000 engines / 100k sandboxes", None, None)
        say("wasted", "<= 5% wasted engine work at 1000 engines / 100k sandboxes", None, None)
    else:
        u, w = goal_row["engine_utilization"], goal_row["wasted_share"]
        say(
            "utilization",
            f">= 90% engine utilization at 1000 engines / 100k sandboxes ({u:.1%})",
            u >= 0.9,
            u,
        )
        say("wasted", f"<= 5% wasted engine work at 1000 engines / 100k sandboxes ({w:.1%})", w <= 0.05, w)
    if goal_row is None or base_row is None:
        say("cpu_growth", "control-plane CPU per rollout, 1000 engines / 100k vs 8 / 1k, <= 1.2x", None, None)
    else:
        ratio = goal_row["cpu_ms_per_rollout"] / base_row["cpu_ms_per_rollout"]
        say(
            "cpu_growth",
            f"control-plane CPU per rollout, 1000 engines / 100k vs 8 / 1k, <= 1.2x "
            f"({base_row['cpu_ms_per_rollout']:.2f} -> {goal_row['cpu_ms_per_rollout']:.2f} ms, {ratio:.2f}x)",
            ratio <= 1.2,
            ratio,
        )

    run = args.real_run
    if run is None and not args.quick:
        run = real_run(ROOT / "bench" / "results" / "scale-real-run", args.replicas)
    if run is not None:
        vrows = validate(run, args.seeds)
        results["validation"] = {"real_run": str(run), "rows": vrows}
        v = Table(title=f"validation: simulator vs the real run in {run} (goal: within 15%)")
        for col in (
            "prediction",
            "rollouts/min sim",
            "real",
            "error",
            "trainer idle sim",
            "real",
            "error",
            "within 15%",
        ):
            v.add_column(col)
        for row in vrows:
            a, b = row["rollouts_per_min"], row["trainer_idle"]
            ok = abs(a["error"]) <= 0.15 and abs(b["error"]) <= 0.15
            v.add_row(
                row["prediction"], f"{a['simulated']:.1f}", f"{a['measured']:.1f}", f"{a['error']:+.1%}",
                f"{b['simulated']:.1%}", f"{b['measured']:.1%}", f"{b['error']:+.1%}", "yes" if ok else "NO",
            )  # fmt: skip
        console.print(v)
    results["loadavg_end"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=1))
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
