"""Benchmark: task building from a fixed set of popular pure-Python libraries from PyPI.

For each library (its sdist, `pip download --no-deps --no-binary :all: NAME==VER`, cached outside
the repository), `inhabit tasks build` with its defaults (no `--command`: the default command,
the project's declared test environment) over 12 candidates, then `tasks check` twice more on every
kept task (the build checked it once already; `-j` tasks at a time). Reported per library: valid tasks of the
candidates, build time, grading time per task (half a `tasks check`, which grades the untouched
workspace and the reference fix), each rejected candidate's reason, the bug mix (operators kept
and how the kept bugs fail: wrong value or exception) and the measurement options left out of the
project's addopts. Goal per library: at least 8 valid tasks of 12 candidates, every kept task
passing `tasks check` twice, no `--command` override. Baseline, measured in the same run: one bare
pytest run of the suite on the host (no sandbox, plugin autoload off), the unit of the grading
cost. Libraries can be measured one run at a time (`--only`): bench/results/tasks.json keeps the
last row of each with its date, and the table lists the whole set, `not measured` where no run
has a row.

    .venv/bin/python bench/tasks.py [--only isodate,semver] [--candidates 12] [-j 2] [--cache DIR] [--work DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.envs.store import EnvStore
from inhabit.grading.check import check_task
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.taskgen.builder import BuildConfig, build_tasks
from inhabit.taskgen.source import default_command

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = (
    "isodate==0.7.2",
    "semver==3.1.2",
    "humanize==4.17.0",
    "boltons==26.2.0",
    "toolz==1.2.0",
    "python-slugify==9.2.0",
    "cachetools==8.0.2",
    "more-itertools==11.2.1",
    "inflection==0.5.1",
)
GOAL_VALID = 8


def sdist(spec: str, cache: Path) -> Path:
    name, version = spec.split("==")
    stem = f"{name.replace('-', '_')}-{version}"
    for candidate in (cache / f"{stem}.tar.gz", cache / f"{name}-{version}.tar.gz"):
        if candidate.is_file():
            return candidate
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    spec, "-d", str(cache)], check=True, timeout=600)  # fmt: skip
    return next(p for p in cache.glob("*.tar.gz") if p.name.lower().startswith((stem.lower(), f"{name}-")))


def bare_run_s(archive: Path, env_id: str | None) -> float:
    """One pytest run of the suite on the host, outside any sandbox, by the interpreter the build's
    sandboxes use: the project's test environment where it has one, else inhabit's own (a bare
    `python` on PATH may be another installation, without the suite's requirements)."""
    python = sys.executable
    if env_id is not None and (built := EnvStore().get(env_id)) is not None:
        python = str(built / "bin" / "python")
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = list(Path(tmp).iterdir())
        t = time.perf_counter()
        subprocess.run(
            ["sh", "-c", f"{default_command(top, python=python)} --tb=no"],
            cwd=top,
            capture_output=True,
            timeout=900,
        )
        return time.perf_counter() - t


async def one(spec: str, args: argparse.Namespace, provider, work: Path) -> dict:
    archive = sdist(spec, Path(args.cache))
    out = work / spec.split("==")[0]
    if not args.work:  # a fresh build; with --work an earlier one there resumes
        shutil.rmtree(out, ignore_errors=True)
    t = time.perf_counter()
    report = await build_tasks(
        archive,
        out,
        provider,
        BuildConfig(max_candidates=args.candidates),
        concurrency=args.concurrency,
        progress=False,
    )
    build_s = time.perf_counter() - t
    baseline = bare_run_s(archive, report.env_id)
    checks, grading_s = {}, []
    gate = asyncio.Semaphore(args.concurrency)

    async def check_twice(task_id: str) -> None:
        # Two checks in a row of one task; tasks are checked `-j` at a time.
        results = []
        for _ in range(2):
            async with gate:
                t = time.perf_counter()
                check = await check_task(out / task_id, provider)
                grading_s.append((time.perf_counter() - t) / 2)
            results.append(check.valid)
            if not check.valid:
                checks.setdefault("problems", {})[task_id] = check.problem_lines()[:3]
        checks[task_id] = all(results)

    await asyncio.gather(*(check_twice(task_id) for task_id in report.tasks))
    valid = report.kept
    twice = all(v for k, v in checks.items() if k != "problems")
    return {
        "library": spec,
        "sdist": archive.name,
        "bare_suite_s": round(baseline, 2),
        "sandboxed_baseline_s": report.baseline_s,
        "baseline_tests": report.baseline_tests,
        "candidates": report.candidates,
        "valid": valid,
        "statuses": report.statuses,
        "build_s": round(build_s, 1),
        "grading_s_per_task": round(statistics.mean(grading_s), 2) if grading_s else None,
        "checked_twice": twice,
        "check_problems": checks.get("problems", {}),
        "operators": report.operators,
        "failure_kinds": report.failure_kinds,
        "rejected": report.rejected,
        "measurement_options_dropped": report.measurement_options_dropped,
        "env_id": report.env_id,
        "met": valid >= GOAL_VALID and twice,
    }


def merged_rows(path: Path, fresh: dict[str, dict]) -> list[dict]:
    """Every library of the set in order: this run's row, else the last one measured, else none.

    Libraries are measured one at a time (`--only`, a run each), so the file keeps the rows of the
    earlier runs that this one did not repeat, each with the date it was measured.
    """
    earlier = {}
    if path.is_file():
        earlier = {r["library"]: r for r in json.loads(path.read_text()) if r.get("library") in LIBRARIES}
    return [
        fresh.get(spec) or earlier.get(spec) or {"library": spec, "not_measured": True} for spec in LIBRARIES
    ]


async def main(args: argparse.Namespace) -> list[dict]:
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="inhabit-bench-tasks-"))
    provider = create_provider(SandboxConfig(backend=args.backend))
    wanted = [s for s in LIBRARIES if not args.only or s.split("==")[0] in args.only.split(",")]
    fresh: dict[str, dict] = {}
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    store = results / "tasks.json"
    console = Console(width=220)  # the table is wide; a log file is no terminal
    # Rows from several runs are printed together: each says which code measured it.
    git = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    commit = git.stdout.strip() or "unknown"
    try:
        for spec in wanted:
            t = time.perf_counter()
            try:
                row = await one(spec, args, provider, work)
            except Exception as e:  # a library that cannot build is a row that says why
                row = {"library": spec, "error": f"{type(e).__name__}: {e}"[:500], "met": False}
            row["wall_s"] = round(time.perf_counter() - t, 1)
            row["load_average_1m"] = round(os.getloadavg()[0], 1)
            row["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
            row["commit"] = commit
            fresh[spec] = row
            console.print(f"{spec}: {row.get('valid', 0)}/{row.get('candidates', '-')} valid, "
                          f"{'met' if row['met'] else 'not met'} ({row['wall_s']} s)")  # fmt: skip
            rows = merged_rows(store, fresh)
            store.write_text(json.dumps([r for r in rows if not r.get("not_measured")], indent=1))
    finally:
        await provider.close()
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    rows = merged_rows(store, fresh)
    table = Table(title=f"tasks build on the {len(rows)} libraries of the set ({args.backend}, "
                        f"-j {args.concurrency}, {args.candidates} candidates; rows not run now are "
                        f"the last measured, with their date)")  # fmt: skip
    for col in ("library", "measured", "valid / cand.", "build s", "grading s/task (x bare)", "rejected",
                "bug mix (kept)", "fails as", "check x2", f"goal >= {GOAL_VALID}"):  # fmt: skip
        table.add_column(col)
    for r in rows:
        if r.get("not_measured"):
            table.add_row(r["library"], "-", "-", "-", "-", "-", "-", "-", "-", "not measured")
            continue
        when = r.get("measured_at", "-") + (f" ({r['commit']})" if r.get("commit") else "")
        if "error" in r:
            table.add_row(r["library"], when, "-", "-", "-", r["error"][:80], "-", "-", "-", "not met")
            continue
        rejected = ", ".join(f"{k} {v}" for k, v in r["statuses"].items() if k != "kept") or "none"
        mix = ", ".join(f"{op} {n['kept']}" for op, n in sorted(r["operators"].items()) if n["kept"])
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(r["failure_kinds"].items()))
        grading = r["grading_s_per_task"]
        ratio = f"{grading:.1f} ({grading / r['bare_suite_s']:.1f}x)" if grading else "-"
        table.add_row(r["library"], when, f"{r['valid']} / {r['candidates']}", f"{r['build_s']:.0f}", ratio, rejected,
                      mix, kinds, "yes" if r["checked_twice"] else "NO", "met" if r["met"] else "not met")  # fmt: skip
    console.print(table)
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help="Comma-separated library names of the set to run.")
    parser.add_argument("--candidates", type=int, default=12)
    parser.add_argument("-j", "--concurrency", type=int, default=2)
    parser.add_argument("--backend", default="auto", choices=["auto", "bwrap", "process"])
    parser.add_argument(
        "--work",
        help="Build under this folder and keep it: a build interrupted there resumes (its build_s is the rest).",
    )
    parser.add_argument(
        "--cache",
        default=os.path.join(
            os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "inhabit", "sdists"
        ),
        help="Where downloaded sdists are kept (outside the repository).",
    )
    asyncio.run(main(parser.parse_args()))
