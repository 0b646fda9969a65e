"""Benchmark: grading on the whole, untouched suites of real libraries (false positives).

Every library of bench/tasks.py's set (its sdist from the same cache, its declared test
environment as `inhabit tasks build` makes it) runs its whole test suite twice in a sandbox: once
as the agent's own `run_tests` does (the seal plugin loaded, test files trusted by name, nothing
hidden), and once as grading runs a task's reference fix: canaries planted in every test module
(`inhabit.grading.canaries.plant`), the seal plugin loaded with a key, every test file listed as
the task's own (compiled up front, sources hidden), the assertion-pass hook on (every passing `==`
judged), the original project's functions sent (`--no-project-functions`: none, so every class is
judged as if the agent had written it), the process ended at the seal. The code is the
library as released, so any seal event or betrayed canary is a false report, and any test whose
outcome differs from the first run is one grading would get wrong, unless it reads its own source
(hidden in grading; such tests are run once more with the sources kept, and counted apart). Goal
per library: 0 events, 0 canaries betrayed, the same outcomes but for tests that read their own
source. Also printed: both runs' wall time.

    .venv/bin/python bench/seal_suites.py [--only isodate,semver] [--library aiofiles==25.1.0 --plugins]
        [--cache DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

import tasks as task_bench  # bench/tasks.py: the set of libraries and its sdist cache
from inhabit.envs.lock import env_id, lock_requirements, own_python
from inhabit.envs.requirements import project_requirements
from inhabit.envs.store import EnvStore
from inhabit.grading.canaries import as_original, judge, plant
from inhabit.grading.project_functions import project_functions
from inhabit.grading.testrun import run_tests
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.sandbox.base import create_sandbox
from inhabit.taskgen.source import default_command, prepare_source, test_files

ROOT = Path(__file__).resolve().parents[1]


def environment(source: Path) -> Path | None:
    """The project's declared test environment, built (or found) as the task builder does."""
    reqs = project_requirements(source)
    if not reqs:
        return None
    text = lock_requirements(reqs)
    lock = source.parent / "environment.lock"
    lock.write_text(text)
    return EnvStore().ensure(env_id(own_python(), text.encode()), lock).path


async def _run(provider, source: Path, env, command: str, graded: dict | None) -> tuple:
    """(result, seconds) of one run of the whole suite in a fresh sandbox; `graded`: run_tests'
    grading arguments, plus `planted` (path -> canaried module) written over the tests first."""
    sandbox = await create_sandbox(provider, source, env=env)
    try:
        for path, data in (graded or {}).pop("planted", {}).items():
            await sandbox.delete_file(path)
            await sandbox.write_file(path, data)
        extra = ["--tb=no", "--rootdir=.", "--confcutdir=.", "--continue-on-collection-errors"]
        t = time.perf_counter()
        run = await run_tests(
            sandbox, command, timeout_s=1800, extra_args=extra, warm=False, **(graded or {})
        )
        return run, round(time.perf_counter() - t, 2)
    finally:
        await sandbox.close()


async def one(
    spec: str,
    provider,
    cache: Path,
    work: Path,
    plugins: bool = False,
    seed: int = 0,
    send_functions: bool = True,
) -> dict:
    source = prepare_source(task_bench.sdist(spec, cache), work / spec.split("==")[0] / "source")
    env = await asyncio.to_thread(environment, source)
    command = default_command(source, plugins=plugins)
    files = {p.relative_to(source).as_posix(): p.read_bytes() for p in source.rglob("*") if p.is_file()}
    tests = test_files(source)
    functions = project_functions({p: b for p, b in files.items() if p.endswith(".py") and p not in tests})
    # Canaries in every test module, as grading plants them in a task's required ones; the
    # conftests and configuration are what could name a test (a renamed one must not be).
    modules = {
        p: files[p] for p in tests if p.rsplit("/", 1)[-1].startswith("test_") or p.endswith("_test.py")
    }
    elsewhere = "\n".join(
        files[p].decode(errors="replace") for p in files
        if p.rsplit("/", 1)[-1] in ("conftest.py", "pytest.ini", "setup.cfg", "tox.ini", "pyproject.toml")
    )  # fmt: skip
    planting = plant(modules, random.Random(seed), elsewhere=elsewhere)
    graded_args = {
        "test_files": tests,
        "grading": True,
        "project_functions": functions if send_functions else None,
    }
    plain, plain_s = await _run(provider, source, env, command, None)
    graded, graded_s = await _run(provider, source, env, command, {**graded_args, "planted": planting.files})
    own = as_original(graded.outcomes, planting.canaries, planting.renamed)
    row: dict = {"library": spec, "test_files": len(tests), "plain_s": plain_s, "graded_s": graded_s}
    row["tests"] = len(plain.outcomes)
    row["passed_plain"], row["passed_graded"] = len(plain.passed), sum(o == "passed" for o in own.values())
    row["canaries"] = len(planting.canaries)
    row["betrayed"] = judge(planting.canaries, graded.outcomes)[:20]
    row["differ"] = sorted(n for n in set(plain.outcomes) | set(own) if plain.outcomes.get(n) != own.get(n))[
        :20
    ]
    if row["differ"]:  # again with the test sources kept: tests that read their own source
        kept, _ = await _run(provider, source, env, command, {**graded_args, "hide_test_sources": False})
        row["differ_with_sources_kept"] = sorted(
            n for n in row["differ"] if plain.outcomes.get(n) != kept.outcomes.get(n)
        )
    row["events"] = list(graded.tampering)[:20]
    row["integrity"] = graded.integrity
    # A test that reads its own source fails with the sources hidden (docs/grading.md, "Answer
    # keys"): no false report of the seal, but a test grading must not require.
    row["met"] = (
        not row["events"] and not row["betrayed"] and not row.get("differ_with_sources_kept", row["differ"])
    )
    row["met"] = row["met"] and graded.integrity == "ok" and bool(plain.passed)
    return row


async def main(args: argparse.Namespace) -> list[dict]:
    provider = create_provider(SandboxConfig(backend=args.backend))
    wanted = [s for s in task_bench.LIBRARIES if not args.only or s.split("==")[0] in args.only.split(",")]
    if args.library:  # libraries outside the set, in place of it
        wanted = list(args.library)
    rows = []
    console = Console(width=200)
    with tempfile.TemporaryDirectory(prefix="inhabit-bench-seal-suites-") as tmp:
        try:
            for spec in wanted:
                try:
                    row = await one(
                        spec, provider, Path(args.cache), Path(tmp), plugins=args.plugins,
                        send_functions=not args.no_project_functions,
                    )  # fmt: skip
                except Exception as e:  # a library that cannot run is a row that says why
                    row = {"library": spec, "error": f"{type(e).__name__}: {e}"[:300], "met": False}
                row["measured_at"] = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
                row["load_average_1m"] = round(os.getloadavg()[0], 1)
                rows.append(row)
                console.print(
                    f"{spec}: {'met' if row['met'] else 'NOT met'} {row.get('events', row.get('error'))}"
                )
        finally:
            await provider.close()
    table = Table(
        title=f"whole suites of the untouched libraries, as the agent runs them and as grading does ({args.backend})"
    )
    for col in ("library", "tests", "passed plain / graded", "outcomes differ", "seal events", "canaries (betrayed)",
                "plain s", "graded s", "goal: 0 events, 0 betrayed, same outcomes"):  # fmt: skip
        table.add_column(col)
    for r in rows:
        if "error" in r:
            table.add_row(r["library"], "-", "-", "-", r["error"][:60], "-", "-", "-", "not met")
            continue
        differ = str(len(r["differ"]))
        if r["differ"]:
            differ += f" ({len(r['differ']) - len(r['differ_with_sources_kept'])} read their own source)"
        table.add_row(
            r["library"], str(r["tests"]), f"{r['passed_plain']} / {r['passed_graded']}", differ,
            "; ".join(r["events"])[:120] or "0", f"{r['canaries']} ({len(r['betrayed'])})", f"{r['plain_s']:.1f}", f"{r['graded_s']:.1f}",
            "met" if r["met"] else "NOT met",
        )  # fmt: skip
    console.print(table)
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--only", help="Comma-separated library names of bench/tasks.py's set.")
    parser.add_argument(
        "--library", action="append", help="NAME==VERSION from PyPI instead of the set (repeatable)."
    )
    parser.add_argument(
        "--plugins", action="store_true", help="Pytest plugin autoload on (pytest-asyncio suites)."
    )
    parser.add_argument(
        "--no-project-functions", action="store_true",
        help="Send no original function hashes: every class judged as if the agent had written it.",
    )  # fmt: skip
    parser.add_argument("--backend", default="auto", choices=["auto", "bwrap", "process"])
    parser.add_argument("--cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                                                        "inhabit", "sdists"))  # fmt: skip
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "seal_suites.json"))
    asyncio.run(main(parser.parse_args()))
