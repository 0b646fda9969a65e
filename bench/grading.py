"""Benchmark: what hardened grading costs over a bare pytest run of the same tests.

For the example task (demo-001, fixed), per backend: the median wall time of `grade()` (fresh
sandbox from a snapshot, neutralization, hidden overlay, sealed run, after-run check), of
`run_tests()` (the sealed run alone), and of a bare `exec` of the task's pytest command on the
same test files in an equivalent fresh sandbox (the baseline). Prints a table with the ratios and
writes bench/results/grading.json.

    .venv/bin/python bench/grading.py [--backends process bwrap] [--reps 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.grading.grader import grade
from inhabit.grading.testrun import run_tests
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.tasks.build import CALC_FIXED
from inhabit.tasks.task import load_task

ROOT = Path(__file__).resolve().parents[1]


async def measure(backend: str, reps: int) -> dict[str, float]:
    task = load_task(ROOT / "examples" / "tasks" / "demo-001")
    assert task.grading is not None and task.hidden_dir is not None
    provider = create_provider(SandboxConfig(backend=backend))  # type: ignore[arg-type]
    times: dict[str, list[float]] = {"grade": [], "run_tests": [], "bare": []}
    try:
        final = await provider.create(task.workspace_dir)
        await final.write_file("calc.py", CALC_FIXED)
        graded = await provider.create(await final.snapshot())
        for path in task.hidden_files():  # the baseline sees the same tests as grading
            await graded.write_file(path, (task.hidden_dir / path).read_bytes())
        files = " ".join(task.grading.test_files)
        for _ in range(reps):
            t = time.perf_counter()
            result = await grade(task, final, provider)
            times["grade"].append(time.perf_counter() - t)
            assert result.reward == 1.0, result
            t = time.perf_counter()
            await run_tests(graded, task.grading.command, selector=files, timeout_s=120)
            times["run_tests"].append(time.perf_counter() - t)
            t = time.perf_counter()
            res = await graded.exec(f"{task.grading.command} {files}", timeout_s=120)
            times["bare"].append(time.perf_counter() - t)
            assert res.exit_code == 0, res.stdout
    finally:
        await provider.close()
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", nargs="+", default=["process", "bwrap"])
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    table = Table(title="grading cost (median seconds; baseline: bare pytest exec)")
    for col in ("backend", "bare pytest", "run_tests", "grade", "run_tests / bare", "grade / bare"):
        table.add_column(col, justify="right")
    results = {}
    for backend in args.backends:
        m = asyncio.run(measure(backend, args.reps))
        results[backend] = {
            **m,
            "run_tests_ratio": m["run_tests"] / m["bare"],
            "grade_ratio": m["grade"] / m["bare"],
        }
        table.add_row(
            backend,
            f"{m['bare']:.2f}",
            f"{m['run_tests']:.2f}",
            f"{m['grade']:.2f}",
            f"{m['run_tests'] / m['bare']:.2f}x",
            f"{m['grade'] / m['bare']:.2f}x",
        )
    Console().print(table)
    out = ROOT / "bench" / "results" / "grading.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"reps": args.reps, "results": results}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
