"""Benchmark: cold vs warm pytest runs (inhabit.sandbox.warm) on a quickstart task, bwrap backend.

Two workloads, each cold and warm in the same process, alternating:
  * agent: one sandbox (as an episode's), `--runs` `run_tests` calls of the task's command. Per
    run: wall time and CPU time (see CpuMeter: a cgroup of this process, which counts every process
    in it: bwrap, the supervisor, the worker, the runs, and this process). The warm column's first run includes the
    worker's start; "steady" is the median of the others.
  * grade: `--grades` gradings (fresh sandbox each) of the task's fixed workspace with
    `GradingConfig.warm_tests` off and on: wall, and CPU of this process plus its reaped children
    (CpuMeter again).
Prints a table with warm / cold ratios and writes bench/results/testrun.json.

    .venv/bin/python bench/testrun.py [--runs 10] [--grades 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.grading.grader import GradingConfig, grade
from inhabit.grading.testrun import RUNNER_COUNTS, run_tests
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.taskgen.families.quickstart import generate, write_quick_task
from inhabit.tasks.task import load_task

ROOT = Path(__file__).resolve().parents[1]


class CpuMeter:
    """CPU seconds used by this process and every process it starts (sandboxes included), from a
    cpuacct cgroup (v1) or a cgroup v2 group made for it and this process moved into it: children
    inherit it, and their usage stays counted after they exit, whichever process reaps them
    (rusage of children is not: a sandbox's processes are reaped inside its pid namespace)."""

    def __init__(self) -> None:
        self.path: Path | None = None
        for base, name in (
            (Path("/sys/fs/cgroup/cpuacct"), "cpuacct.usage"),
            (Path("/sys/fs/cgroup"), "cpu.stat"),
        ):
            g = base / f"inhabit-bench-testrun-{os.getpid()}"
            try:
                g.mkdir()
                (g / "cgroup.procs").write_text(str(os.getpid()))
                self.path, self.name = g / name, name
                self.read()
                return
            except (OSError, ValueError):
                with contextlib.suppress(OSError):
                    g.rmdir()
                self.path = None

    def read(self) -> float:
        """Seconds so far (nan where no group could be made)."""
        if self.path is None:
            return float("nan")
        text = self.path.read_text()
        if self.name == "cpu.stat":
            return int(dict(line.split() for line in text.splitlines())["usage_usec"]) * 1e-6
        return int(text.strip()) * 1e-9


async def agent(task, provider, meter: CpuMeter, warm: bool, runs: int) -> dict:
    """One sandbox, `runs` test runs; per-run wall and CPU."""
    walls, cpus = [], []
    sb = await provider.create(task.workspace_dir)
    try:
        for _ in range(2):  # the first exec takes its own bwrap, the second starts the supervisor
            await sb.exec("true")
        for _ in range(runs):
            c0, t0 = meter.read(), time.perf_counter()
            result = await run_tests(sb, task.grading.command, timeout_s=120, warm=warm)
            walls.append(time.perf_counter() - t0)
            cpus.append(meter.read() - c0)
            assert result.integrity == "ok" and (result.runner == "warm") == warm, result.runner
    finally:
        await sb.close()
    return {"wall_s": walls, "cpu_s": cpus}


async def grading(task, provider, meter: CpuMeter, warm: bool, grades: int) -> dict:
    final = await provider.create(task.workspace_dir)
    try:
        walls, cpus = [], []
        for _ in range(grades):
            c0, t0 = meter.read(), time.perf_counter()
            result = await grade(task, final, provider, config=GradingConfig(warm_tests=warm))
            walls.append(time.perf_counter() - t0)
            cpus.append(meter.read() - c0)
            assert result.status == "graded" and result.details["runner"].startswith(
                "warm" if warm else "cold"
            )
    finally:
        await final.close()
    return {"wall_s": walls, "cpu_s": cpus}


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


async def main_async(args: argparse.Namespace) -> dict:
    root = Path(tempfile.mkdtemp(prefix="inhabit-bench-testrun-"))
    task = load_task(write_quick_task(root, generate(1, seed=0)[0]))
    provider = create_provider(SandboxConfig(backend="bwrap"))
    meter = CpuMeter()
    out: dict = {"task": task.id, "command": task.grading.command, "runs": args.runs, "grades": args.grades}
    try:
        for _ in range(args.reps):
            for warm in (False, True):
                key = "warm" if warm else "cold"
                a = await agent(task, provider, meter, warm, args.runs)
                g = await grading(task, provider, meter, warm, args.grades)
                out.setdefault("agent", {}).setdefault(key, []).append(a)
                out.setdefault("grade", {}).setdefault(key, []).append(g)
    finally:
        await provider.close()
    out["runner_counts"] = dict(RUNNER_COUNTS)
    out["exec_counts"] = dict(provider.exec_counts)
    out["load_after"] = os.getloadavg()
    return out


def summarize(out: dict) -> dict:
    s: dict = {}
    for mode in ("cold", "warm"):
        agent_runs = out["agent"][mode]
        first = [r["wall_s"][0] for r in agent_runs], [r["cpu_s"][0] for r in agent_runs]
        rest_w = [w for r in agent_runs for w in r["wall_s"][1:]]
        rest_c = [c for r in agent_runs for c in r["cpu_s"][1:]]
        grades = out["grade"][mode]
        s[mode] = {
            "agent_first_wall": med(first[0]),
            "agent_first_cpu": med(first[1]),
            "agent_steady_wall": med(rest_w),
            "agent_steady_cpu": med(rest_c),
            "agent_total_cpu_per_run": statistics.mean(
                [sum(r["cpu_s"]) / len(r["cpu_s"]) for r in agent_runs]
            ),
            "grade_wall": med([w for g in grades for w in g["wall_s"]]),
            "grade_cpu": med([c for g in grades for c in g["cpu_s"]]),
        }
    return s


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10, help="test runs per agent sandbox")
    ap.add_argument("--grades", type=int, default=10, help="gradings per mode")
    ap.add_argument("--reps", type=int, default=2, help="cold/warm alternations")
    args = ap.parse_args()
    load_before = os.getloadavg()
    out = asyncio.run(main_async(args))
    out["load_before"] = load_before
    s = out["summary"] = summarize(out)
    table = Table(title=f"cold vs warm pytest runs, {out['task']} (medians, seconds)")
    for col in ("measure", "cold", "warm", "warm / cold"):
        table.add_column(col, justify="right")
    for key, label in (
        ("agent_first_wall", "agent: first run, wall"),
        ("agent_first_cpu", "agent: first run, CPU"),
        ("agent_steady_wall", "agent: later runs, wall"),
        ("agent_steady_cpu", "agent: later runs, CPU"),
        ("agent_total_cpu_per_run", f"agent: CPU per run over {args.runs} runs"),
        ("grade_wall", "grade(): wall"),
        ("grade_cpu", "grade(): CPU"),
    ):
        c, w = s["cold"][key], s["warm"][key]
        table.add_row(label, f"{c:.3f}", f"{w:.3f}", f"{w / c:.2f}x" if c else "-")
    Console().print(table)
    print(f"load average before {load_before}, after {out['load_after']}")
    path = ROOT / "bench" / "results" / "testrun.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
