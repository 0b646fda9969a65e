"""Benchmark rollouts on Ray: throughput with 1, 2 and 4 engine actors against local placement.

The workload is dominated by sandbox time: every task's test sleeps (`--sleep`, default 1 s), so
a rollout is a few tiny-model turns, a sandbox, and grading that waits on the sleeping test. The
same rollouts (same tasks, seeds, harness, concurrency) run

    local      one EmbeddedEngine in this process, process-backend sandboxes in this process
    ray-N      N EngineActors + `--env-servers` EnvServerActors on a one-machine Ray, through
               DispatchRunner (least-outstanding dispatch, sticky per rollout)

and report rollouts per minute and the ratio to local. The overhead of Ray dispatch per rollout
is measured directly: the extra latency of one `generate` call through an actor over the same
call in-process (median of `--calls`), times the generate calls a rollout makes, plus the time
spent picking actors. Prints a rich table, writes bench/results/ray_scaling.json.

    .venv/bin/python bench/ray_scaling.py [--rollouts 32] [--concurrency 8] [--sleep 1.0]

On a small shared machine the engine count barely matters (the model is tiny and sandboxes
dominate; more actors also compete for the same cores): the numbers say what Ray costs, not
how a cluster scales. Wall times are noisy; the load average is printed with them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.orchestrator.config import RunConfig

SPEC = {
    "hidden_size": 32,
    "num_layers": 1,
    "num_heads": 2,
    "num_kv_heads": 1,
    "intermediate_size": 64,
    "max_position_embeddings": 512,
}


def write_tasks(root: Path, n: int, sleep_s: float) -> list[Any]:
    from inhabit.tasks.task import load_task

    tasks = []
    for i in range(n):
        d = root / f"slow-{i:03d}"
        (d / "workspace" / "tests").mkdir(parents=True)
        (d / "workspace" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
        (d / "workspace" / "tests" / "test_calc.py").write_text(
            textwrap.dedent(f"""\
                import time
                from calc import add

                def test_add():
                    time.sleep({sleep_s})
                    assert add(2, 3) == 5
            """)
        )
        (d / "task.toml").write_text(
            textwrap.dedent(f"""\
                id = "slow-{i:03d}"
                instruction = "tests/test_calc.py::test_add fails. Fix calc.py."
                [grading]
                command = "python -m pytest -q -p no:cacheprovider"
                fail_to_pass = ["tests/test_calc.py::test_add"]
                timeout_s = 60
            """)
        )
        tasks.append(load_task(d))
    return tasks


def build_model(out: Path) -> Path:
    from inhabit.models.tiny import TinyModelSpec, build_tiny_model, save_model_folder
    from inhabit.orchestrator.quickstart.bootstrap import quickstart_tokenizer

    tok = quickstart_tokenizer()
    vocab = (max(len(tok), 64) + 63) // 64 * 64
    save_model_folder(build_tiny_model(TinyModelSpec(**SPEC), vocab_size=vocab), tok, out)
    return out


def run_config(args: argparse.Namespace, root: Path, engines: int) -> RunConfig:
    return RunConfig.model_validate(
        {
            "model": {"path": str(root / "model")},
            "tasks": {"source": "dir", "dir": str(root / "tasks")},
            "run_dir": str(root / "run"),
            "harness": {"max_turns": 2},
            "engine": {"max_model_len": 512, "seed": 0, "num_threads": 1},
            "sandbox": {"backend": "process"},
            "rollout": {"group_size": 4, "concurrency": args.concurrency, "max_tokens": 12, "timeout_s": 120},
            "placement": {
                "backend": "ray",
                "ray": {
                    "engines": engines,
                    "env_servers": args.env_servers,
                    "bind_host": "127.0.0.1",
                    "engine": {"num_cpus": 0, "resources": {"rollout": 1}},
                    "env_server": {"num_cpus": 0, "resources": {"sandbox": 1}},
                },
            },
        }
    )


async def drive(runner: Any, tasks: list[Any], rollouts: int) -> dict[str, Any]:
    groups = rollouts // runner.cfg.group_size
    t0 = time.monotonic()
    done = await asyncio.gather(*(runner.run_group(tasks[i % len(tasks)], i) for i in range(groups)))
    wall = time.monotonic() - t0
    trajs = [t for g in done for t in g.trajectories]
    calls = sum(len(s.turns) for t in trajs for s in t.segments)
    return {
        "rollouts": len(trajs),
        "wall_s": round(wall, 3),
        "rollouts_per_min": round(len(trajs) / wall * 60, 1),
        "generate_calls_per_rollout": calls / max(1, len(trajs)),
        "statuses": sorted({t.status for t in trajs}),
        "grading_s_mean": round(statistics.mean(t.timings.get("grading_s", 0.0) for t in trajs), 3),
    }


async def call_latency(engine: Any, calls: int) -> float:
    req = GenerationRequest([1, 2, 3, 4], SamplingParams(max_tokens=1, temperature=1.0, seed=0))
    await engine.generate([req])  # warm
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await engine.generate([req])
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def actor_rtt(handle: Any, calls: int) -> float:
    """Median round trip of a no-op-sized actor call (`stats`): Ray's own cost per call."""
    await handle.stats.remote()
    times = []
    for _ in range(calls):
        t0 = time.perf_counter()
        await handle.stats.remote()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def local(args: argparse.Namespace, root: Path, tasks: list[Any]) -> tuple[dict, float]:
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.rollouts import EngineRunner
    from inhabit.sandbox import create_provider

    cfg = run_config(args, root, 1)
    engine = EmbeddedEngine.from_path(root / "model", cfg.engine)
    provider = create_provider(cfg.sandbox)
    try:
        runner = EngineRunner(
            engine, engine.tokenizer, provider, harness=cfg.harness, rollout=cfg.rollout, seed=0
        )
        await drive(runner, tasks, cfg.rollout.group_size * 2)  # warm-up
        row = await drive(runner, tasks, args.rollouts)
        lat = await call_latency(engine, args.calls)
    finally:
        await engine.close()
        await provider.close()
    return row, lat


async def on_ray(args: argparse.Namespace, root: Path, tasks: list[Any], n: int) -> tuple[dict, float]:
    from inhabit.placement.cluster import RayPlacement
    from inhabit.placement.dispatch import DispatchRunner

    cfg = run_config(args, root, n)
    placement = RayPlacement(cfg)
    placement.store_url = str(root / "weights")  # empty store: engines keep their initial weights
    try:
        pool = await placement.start_engines(root / "model")
        servers = await placement.start_env_servers()
        runner = DispatchRunner(
            pool, pool.tokenizer, None, env_servers=servers, ray=cfg.placement.ray,
            harness=cfg.harness, rollout=cfg.rollout, seed=0,
        )  # fmt: skip
        await drive(runner, tasks, cfg.rollout.group_size * 2)  # warm-up
        runner.dispatch_s = 0.0
        row = await drive(runner, tasks, args.rollouts)
        row["dispatch_wait_s_per_rollout"] = runner.dispatch_s / max(1, row["rollouts"])
        lat = await call_latency(pool.fleet.members[0].payload, args.calls)
        row["actor_rtt_s"] = await actor_rtt(pool.fleet.members[0].handle, args.calls)
        await placement.close_fleets()
    finally:
        placement.shutdown()  # kills this configuration's actors (Ray itself stays up)
    return row, lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rollouts", type=int, default=32, help="Rollouts per configuration (multiple of 4).")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--sleep", type=float, default=1.0, help="Seconds each task's test sleeps.")
    ap.add_argument("--engines", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--env-servers", type=int, default=2)
    ap.add_argument("--calls", type=int, default=50, help="generate calls timed for the per-call overhead.")
    ap.add_argument("--out", default="bench/results/ray_scaling.json")
    args = ap.parse_args()

    import ray

    from inhabit.placement.cluster import runtime_env

    console = Console(width=120)
    with tempfile.TemporaryDirectory(prefix="inhabit-ray-bench-") as tmp:
        root = Path(tmp)
        tasks = write_tasks(root / "tasks", 8, args.sleep)
        build_model(root / "model")
        results: dict[str, Any] = {"args": vars(args), "loadavg_start": os.getloadavg()}
        row, lat_local = asyncio.run(local(args, root, tasks))
        results["local"] = row | {"generate_call_s": lat_local}
        console.print(f"local: {row['rollouts_per_min']} rollouts/min")
        t0 = time.monotonic()
        ray.init(
            num_cpus=4, resources={"rollout": 8, "sandbox": 8}, include_dashboard=False,
            runtime_env=runtime_env(), log_to_driver=False, configure_logging=False,
        )  # fmt: skip
        results["ray_init_s"] = round(time.monotonic() - t0, 2)
        try:
            for n in args.engines:
                t0 = time.monotonic()
                row, lat = asyncio.run(on_ray(args, root, tasks, n))
                row |= {"generate_call_s": lat, "config_s": round(time.monotonic() - t0, 1)}
                results[f"ray-{n}"] = row
                console.print(f"ray, {n} engines: {row['rollouts_per_min']} rollouts/min")
        finally:
            ray.shutdown()
        results["loadavg_end"] = os.getloadavg()

    base = results["local"]["rollouts_per_min"]
    table = Table(title=f"Rollouts on Ray vs local ({args.rollouts} rollouts, test sleeps {args.sleep:g} s)")
    for col in ("placement", "rollouts/min", "vs local", "wall s", "generate call ms", "grading s", "status"):
        table.add_column(col, justify="right" if col not in ("placement", "status") else "left")
    for key in ["local", *(f"ray-{n}" for n in args.engines)]:
        r = results[key]
        label = "local" if key == "local" else f"ray, {key[4:]} engine(s)"
        table.add_row(
            label, f"{r['rollouts_per_min']:.1f}", f"{r['rollouts_per_min'] / base:.2f}x", f"{r['wall_s']:.1f}",
            f"{1000 * r['generate_call_s']:.2f}", f"{r['grading_s_mean']:.2f}", ",".join(r["statuses"]),
        )  # fmt: skip
    console.print(table)
    ray_rows = [results[f"ray-{n}"] for n in args.engines]
    rtt = statistics.median(r["actor_rtt_s"] for r in ray_rows)
    diff = statistics.median(r["generate_call_s"] for r in ray_rows) - results["local"]["generate_call_s"]
    calls = statistics.mean(r["generate_calls_per_rollout"] for r in ray_rows)
    wait = statistics.mean(r["dispatch_wait_s_per_rollout"] for r in ray_rows)
    overhead = rtt * calls + wait
    local_rollout_s = args.concurrency * 60 / base  # Little's law: mean time in flight
    results["overhead"] = {
        "actor_rtt_s": rtt,
        "generate_call_diff_s": diff,
        "generate_calls_per_rollout": calls,
        "dispatch_wait_s_per_rollout": wait,
        "per_rollout_s": overhead,
        "local_rollout_s": local_rollout_s,
        "fraction_of_local_rollout": overhead / local_rollout_s,
    }
    console.print(
        f"Ray dispatch overhead per rollout: {1000 * overhead:.1f} ms = {1000 * rtt:.2f} ms actor round trip "
        f"x {calls:.1f} generate calls + {1000 * wait:.2f} ms picking actors "
        f"({100 * overhead / local_rollout_s:.2f}% of a {local_rollout_s:.1f} s rollout); "
        f"generate call through an actor minus in-process: {1000 * diff:+.2f} ms; "
        f"load average {results['loadavg_start'][0]:.1f} -> {results['loadavg_end'][0]:.1f}"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
