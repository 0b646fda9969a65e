"""Benchmark the harness: per-call overhead against the raw sandbox operation, and parallel turns.

1. Overhead: one tool call through the whole turn path (parse, argument check, tool, observation
   formatting, record) against the raw sandbox operation it wraps (`run` vs `Sandbox.exec`,
   `read_file` vs `Sandbox.read_file`), median over N calls; ratio = harness / raw.
2. A turn with four independent slow calls (`run` of `sleep S`): parallel (the loop's default)
   versus sequential (max_parallel_calls=1), against the slowest single call alone.
   Goal: the parallel turn within 1.3x of the slowest single call.

    .venv/bin/python bench/harness.py [--backend process|bwrap|auto] [--n 30] [--sleep 0.5]

Prints a rich table and writes bench/results/harness.json. Timings on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.harness.config import HarnessConfig
from inhabit.harness.execute import execute_calls
from inhabit.harness.parse import render_call
from inhabit.harness.tools import ToolContext
from inhabit.sandbox import SandboxConfig, create_provider


async def _median(fn, n: int) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        await fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def main(backend: str, n: int, sleep_s: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        repo.mkdir()
        (repo / "calc.py").write_text("".join(f"def f{i}(x):\n    return x + {i}\n\n" for i in range(100)))
        provider = create_provider(SandboxConfig(backend=backend))  # type: ignore[arg-type]
        sandbox = await provider.create(repo)
        try:
            cfg = HarnessConfig()
            ctx = ToolContext(sandbox=sandbox, config=cfg, test_command="true")
            seq_ctx = ToolContext(
                sandbox=sandbox, config=cfg.model_copy(update={"max_parallel_calls": 1}), test_command="true"
            )
            run_true = render_call("run", {"command": "true"})
            read = render_call("read_file", {"path": "calc.py"})
            await sandbox.exec("true")  # warm up
            raw_exec = await _median(lambda: sandbox.exec("true"), n)
            tool_exec = await _median(lambda: execute_calls(run_true, ctx), n)
            raw_read = await _median(lambda: sandbox.read_file("calc.py"), n)
            tool_read = await _median(lambda: execute_calls(read, ctx), n)

            one = render_call("run", {"command": f"sleep {sleep_s}"})
            four = "\n".join([one] * 4)
            single = await _median(lambda: execute_calls(one, ctx), 3)
            parallel = await _median(lambda: execute_calls(four, ctx), 3)
            sequential = await _median(lambda: execute_calls(four, seq_ctx), 3)
        finally:
            await sandbox.close()
            await provider.close()
    return {
        "backend": sandbox.info.backend,
        "n": n,
        "sleep_s": sleep_s,
        "overhead": {
            "run_vs_exec": {"raw_s": raw_exec, "harness_s": tool_exec, "ratio": tool_exec / raw_exec},
            "read_file_vs_read": {"raw_s": raw_read, "harness_s": tool_read, "ratio": tool_read / raw_read},
        },
        "parallel_turn": {
            "slowest_single_s": single,
            "parallel_4_s": parallel,
            "sequential_4_s": sequential,
            "parallel_vs_single": parallel / single,
            "sequential_vs_parallel": sequential / parallel,
            "goal_parallel_vs_single": 1.3,
            "goal_met": parallel / single <= 1.3,
        },
    }


def report(result: dict) -> None:
    console = Console()
    t = Table(title=f"harness overhead ({result['backend']} sandbox, median of {result['n']})")
    for col in ("operation", "raw sandbox (ms)", "through the harness (ms)", "added (ms)", "ratio"):
        t.add_column(col)
    for name, row in result["overhead"].items():
        added = (row["harness_s"] - row["raw_s"]) * 1e3
        t.add_row(
            name,
            f"{row['raw_s'] * 1e3:.2f}",
            f"{row['harness_s'] * 1e3:.2f}",
            f"{added:+.2f}",
            f"{row['ratio']:.2f}x",
        )
    console.print(t)
    p = result["parallel_turn"]
    t = Table(title=f"a turn of 4 x run(sleep {result['sleep_s']})")
    for col in ("variant", "wall (s)", "vs slowest single call"):
        t.add_column(col)
    t.add_row("slowest single call", f"{p['slowest_single_s']:.3f}", "1.00x")
    t.add_row(
        "4 calls, parallel", f"{p['parallel_4_s']:.3f}", f"{p['parallel_vs_single']:.2f}x (goal <= 1.3x)"
    )
    t.add_row(
        "4 calls, sequential",
        f"{p['sequential_4_s']:.3f}",
        f"{p['sequential_4_s'] / p['slowest_single_s']:.2f}x",
    )
    console.print(t)
    console.print(f"parallel goal met: {p['goal_met']}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="process", choices=["process", "bwrap", "auto"])
    ap.add_argument("--n", type=int, default=30)
    ap.add_argument("--sleep", type=float, default=0.5)
    args = ap.parse_args()
    res = asyncio.run(main(args.backend, args.n, args.sleep))
    report(res)
    out = Path(__file__).parent / "results" / "harness.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")
