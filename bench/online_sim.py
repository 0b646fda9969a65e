"""Online learning from simulated users vs offline GRPO at an equal number of episodes (issue 14).

Reads the report that `inhabit online simulate` wrote (`<out>/simulate.json`). For each seed it
runs offline GRPO with `inhabit train` (configs/quickstart.toml's RL settings: group size, tasks per
step, learning rate, loss) from the same starting model, with the users' tasks as its training
tasks, for as many episodes as that seed's online loop trained on (rounded to whole steps of
tasks_per_step x group_size episodes). Then the evaluator the gate uses (`inhabit eval`'s runner,
the local policy with seed 0) scores the starting model, the online loop's last served version and
the offline run's final checkpoint on the users' tasks (`--samples` rollouts per task, 4 by
default), and the offline checkpoint on the gate's held-out tasks (the gate's own sample count).
The gate-task figures of the starting model and of the last served version are the gate's own
(recorded on their cycles; same evaluator, same tasks, same sample count).

    PYTHONPATH=src .venv/bin/python -m inhabit online simulate --seeds 3 --out runs/online-sim
    PYTHONPATH=src .venv/bin/python bench/online_sim.py --sim runs/online-sim

There is no goal: the comparison is the point. Prints one table with the ratio of the offline gain
to the online gain, and writes bench/results/online_sim.json.
"""

from __future__ import annotations

import argparse
import json
import time
import tomllib
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from loadkit import RESULTS, machine, start

ROOT = Path(__file__).resolve().parents[1]


def evaluate(
    model: Path, tasks: Path, records: Path, sim_cfg: dict[str, Any], qs: dict[str, Any], samples: int
) -> float:
    """Success rate of `model` on `tasks` with the gate's evaluator and settings."""
    from inhabit.online.config import GateConfig
    from inhabit.online.gate import evaluate as gate_evaluate

    cfg = GateConfig(
        tasks=str(tasks),
        samples=samples,
        max_turns=qs["harness"]["max_turns"],
        max_turn_tokens=qs["harness"]["max_turn_tokens"],
        sandbox=sim_cfg["sandbox"],
        concurrency=sim_cfg["concurrency"],
    )
    return gate_evaluate(model, records, cfg)["success_rate"]


def offline_config(
    qs: dict[str, Any], model: str, tasks: Path, gate: Path, steps: int, seed: int, run: Path
) -> Path:
    """The quickstart run config, starting from `model`, training on the users' tasks."""
    data = json.loads(json.dumps(qs))
    for key in ("spec", "bootstrap", "init_seed"):
        data["model"].pop(key, None)
    data["model"]["path"] = model
    data["tasks"] = {"source": "dir", "dir": str(tasks), "held_out_dir": str(gate)}
    data["eval"] = {"before": False, "after": False}  # evaluated below, with the gate's evaluator
    data["metrics"] = {"tensorboard": False, "progress": "plain"}
    data |= {"steps": steps, "seed": seed, "run_dir": str(run)}
    data["engine"]["seed"] = seed
    path = run.parent / f"{run.name}.toml"
    lines = []

    def emit(d: dict[str, Any], prefix: str) -> None:
        scalars = {k: v for k, v in d.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in d.items() if isinstance(v, dict)}
        if prefix:
            lines.append(f"\n[{prefix}]")
        lines.extend(f"{k} = {json.dumps(v)}" for k, v in scalars.items())
        for k, v in tables.items():
            emit(v, f"{prefix}.{k}" if prefix else k)

    emit(data, "")
    path.write_text("\n".join(lines) + "\n")
    return path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--sim", type=Path, default=Path("runs/online-sim"), help="inhabit online simulate's --out."
    )
    ap.add_argument("--quickstart", type=Path, default=ROOT / "configs" / "quickstart.toml")
    ap.add_argument("--seeds", type=int, default=None, help="Only the first N seeds of the report.")
    ap.add_argument("--samples", type=int, default=4, help="Rollouts per users' task in each evaluation.")
    args = ap.parse_args()
    report = json.loads((args.sim / "simulate.json").read_text())
    qs = tomllib.loads(args.quickstart.read_text())
    sim_cfg, model = report["config"], report["model"]
    users, gate = (args.sim / "tasks" / "users").resolve(), (args.sim / "tasks" / "gate").resolve()
    work = args.sim / "offline"
    work.mkdir(parents=True, exist_ok=True)
    per_step = qs["rollout"]["tasks_per_step"] * qs["rollout"]["group_size"]
    console = Console(width=200)
    t0 = time.monotonic()
    n, g = args.samples, sim_cfg["gate_samples"]  # gate tasks: the gate's own sample count
    start_users = evaluate(Path(model), users, work / f"start-users-{n}.jsonl", sim_cfg, qs, n)
    rows = []
    for seed_report in report["seeds"][: args.seeds]:
        seed = seed_report["seed"]
        versions = {v["version"]: v for v in seed_report["versions"]}
        first, last = versions[seed_report["first_version"]], versions[seed_report["last_version"]]
        sim_seed = args.sim / f"seed-{seed}"
        online_ckpt = sim_seed / "sessions.db.online" / "checkpoints" / f"v{last['version']:06d}"
        online_users = evaluate(online_ckpt, users, work / f"online-{seed}-users-{n}.jsonl", sim_cfg, qs, n)
        episodes = seed_report["episodes_trained"]
        steps = max(1, round(episodes / per_step))
        run = (work / f"grpo-seed-{seed}").resolve()
        toml = offline_config(qs, model, users, gate, steps, seed, run)
        t1 = time.monotonic()
        proc = start(["train", str(toml)], {}, work / f"grpo-seed-{seed}.log")
        if proc.wait() != 0:
            raise SystemExit(f"inhabit train failed; see {work / f'grpo-seed-{seed}.log'}")
        train_s = time.monotonic() - t1
        from inhabit.trainer.checkpoint import latest_checkpoint

        ckpt = latest_checkpoint(run / "checkpoints")
        assert ckpt is not None, f"no checkpoint under {run}"
        offline_users = evaluate(ckpt, users, work / f"grpo-{seed}-users-{n}.jsonl", sim_cfg, qs, n)
        offline_gate = evaluate(ckpt, gate, work / f"grpo-{seed}-gate-{g}.jsonl", sim_cfg, qs, g)
        rows.append(
            {
                "seed": seed,
                "online_episodes": episodes,
                "offline_steps": steps,
                "offline_episodes": steps * per_step,
                "last_version": last["version"],
                "users_start": start_users,
                "users_online": online_users,
                "users_offline": offline_users,
                "gate_start": first["gate_success"],
                # A rollback version serves its parent's weights and has no gate figure of its own.
                "gate_online": last["gate_success"]
                if last["gate_success"] is not None
                else first["gate_success"],
                "gate_offline": offline_gate,
                "offline_train_s": round(train_s, 1),
                "samples_users": n,
                "samples_gate": g,
            }
        )

    def mean(key: str) -> float:
        vals = [r[key] for r in rows if r[key] is not None]
        return sum(vals) / len(vals) if vals else float("nan")

    table = Table(title="online (simulated users) vs offline GRPO, equal episodes, same starting model")
    cols = (
        "seed",
        "episodes online/offline",
        "users' tasks: start",
        "online",
        "offline",
        "gate tasks: start",
        "online",
        "offline",
    )
    for col in cols:
        table.add_column(col)
    pct = lambda x: "-" if x is None else f"{100 * x:.1f}%"  # noqa: E731
    for r in rows:
        table.add_row(
            str(r["seed"]),
            f"{r['online_episodes']} / {r['offline_episodes']}",
            pct(r["users_start"]),
            pct(r["users_online"]),
            pct(r["users_offline"]),
            pct(r["gate_start"]),
            pct(r["gate_online"]),
            pct(r["gate_offline"]),
        )
    table.add_row(
        "mean",
        f"{mean('online_episodes'):.0f} / {mean('offline_episodes'):.0f}",
        *(pct(mean(k)) for k in ("users_start", "users_online", "users_offline")),
        *(pct(mean(k)) for k in ("gate_start", "gate_online", "gate_offline")),
    )
    console.print(table)
    gains = {
        "users_online_gain": mean("users_online") - mean("users_start"),
        "users_offline_gain": mean("users_offline") - mean("users_start"),
        "gate_online_gain": mean("gate_online") - mean("gate_start"),
        "gate_offline_gain": mean("gate_offline") - mean("gate_start"),
    }
    for k, v in gains.items():
        console.print(f"{k}: {100 * v:+.1f} points")
    ratio = gains["users_offline_gain"] / gains["users_online_gain"] if gains["users_online_gain"] else None
    console.print(f"ratio offline/online gain on users' tasks: {ratio if ratio is None else round(ratio, 2)}")
    out = RESULTS / "online_sim.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps(
            {
                "rows": rows,
                **gains,
                "ratio_offline_over_online_users": ratio,
                "sim": str(args.sim),
                "wall_s": round(time.monotonic() - t0, 1),
                "machine": machine(),
            },
            indent=2,
        )
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
