"""Benchmark: task building from one real source distribution.

Builds tasks from an sdist (downloaded with pip at run time unless --sdist is given; no
third-party code ships) and reports valid tasks per minute, the validity rate of mutations (kept /
candidates tried), the mean time per candidate, and the mean grading time of a built task (one
`grade()` of its reference-fixed workspace, fresh sandbox included). The baseline, measured in the
same run, is one bare pytest run of the same suite on the host (no sandbox, no report): the ratios
say what a candidate and a grading cost in units of that run. Writes bench/results/tasks.json.

    .venv/bin/python bench/tasks.py [--package tabulate | --sdist FILE] [--max-candidates 20] [-j 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.grading.check import apply_patch
from inhabit.grading.grader import grade
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.taskgen.builder import BuildConfig, build_tasks
from inhabit.taskgen.source import default_command
from inhabit.tasks.task import load_task

ROOT = Path(__file__).resolve().parents[1]


def download(package: str, dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    package, "-d", str(dest)], check=True, timeout=600)  # fmt: skip
    return next(dest.glob("*.tar.gz"))


def bare_run_s(sdist: Path) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = list(Path(tmp).iterdir())
        cmd = default_command(top)
        t = time.perf_counter()
        subprocess.run(["sh", "-c", f"{cmd} --tb=no"], cwd=top, capture_output=True, timeout=600)
        return time.perf_counter() - t


async def main(args: argparse.Namespace) -> dict:
    work = Path(tempfile.mkdtemp(prefix="inhabit-bench-tasks-"))
    sdist = Path(args.sdist) if args.sdist else download(args.package, work / "dl")
    baseline = bare_run_s(sdist)
    provider = create_provider(SandboxConfig(backend=args.backend))
    try:
        config = BuildConfig(max_candidates=args.max_candidates)
        t = time.perf_counter()
        report = await build_tasks(sdist, work / "out", provider, config, concurrency=args.concurrency)
        build_s = time.perf_counter() - t
        grading = []
        for task_id in report.tasks:
            task = load_task(work / "out" / task_id)
            t = time.perf_counter()
            sandbox = await provider.create(task.workspace_dir)
            assert task.reference_patch is not None
            assert await apply_patch(sandbox, task.reference_patch.read_bytes()) is None
            result = await grade(task, sandbox, provider)
            await sandbox.close()
            grading.append(time.perf_counter() - t)
            assert result.reward == 1.0, result.details
    finally:
        await provider.close()
    tried = report.candidates - report.statuses.get("error", 0)
    out = {
        "sdist": sdist.name,
        "backend": args.backend,
        "concurrency": args.concurrency,
        "baseline_bare_suite_s": round(baseline, 3),
        "sandboxed_baseline_s": report.baseline_s,
        "candidates": report.candidates,
        "statuses": report.statuses,
        "valid_tasks": report.kept,
        "validity_rate": report.kept / tried if tried else 0.0,
        "build_s": round(build_s, 2),
        "valid_tasks_per_minute": report.kept / (build_s / 60),
        "mean_candidate_s": statistics.mean(report.mutant_s) if report.mutant_s else None,
        "mean_check_s": statistics.mean(report.check_s) if report.check_s else None,
        "mean_grading_s": statistics.mean(grading) if grading else None,
        "load_average_1m": os.getloadavg()[0],
        "note": "shared 2-core machine under load from other sessions: timings are as measured",
    }
    table = Table(title=f"task building from {sdist.name} ({args.backend}, -j {args.concurrency})")
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_column("x bare suite run", justify="right")
    rows = [
        ("bare suite run on the host (baseline, s)", f"{baseline:.2f}", "1.0"),
        (
            "sandboxed baseline run, --tb=no (s)",
            f"{report.baseline_s:.2f}",
            f"{report.baseline_s / baseline:.1f}",
        ),
        ("candidates", str(report.candidates), ""),
        *((f"  {k}", str(v), "") for k, v in report.statuses.items()),
        ("validity rate", f"{out['validity_rate']:.0%}", ""),
        ("valid tasks per minute", f"{out['valid_tasks_per_minute']:.2f}", ""),
    ]
    if out["mean_candidate_s"]:
        rows.append(("mean time per candidate, incl. task check (s)", f"{out['mean_candidate_s']:.1f}",
                     f"{out['mean_candidate_s'] / baseline:.1f}"))  # fmt: skip
    if out["mean_check_s"]:
        rows.append(("  of which task check, 2 gradings (s)", f"{out['mean_check_s']:.1f}",
                     f"{out['mean_check_s'] / baseline:.1f}"))  # fmt: skip
    if out["mean_grading_s"]:
        rows.append(("mean grading time per task (s)", f"{out['mean_grading_s']:.1f}",
                     f"{out['mean_grading_s'] / baseline:.1f}"))  # fmt: skip
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "tasks.json").write_text(json.dumps(out, indent=1))
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--package", default="tabulate", help="PyPI package whose sdist to build from.")
    parser.add_argument("--sdist", help="A local sdist instead of downloading one.")
    parser.add_argument("--max-candidates", type=int, default=20)
    parser.add_argument("-j", "--concurrency", type=int, default=2)
    parser.add_argument("--backend", default="auto", choices=["auto", "bwrap", "process"])
    asyncio.run(main(parser.parse_args()))
