"""Benchmark: what grading's seal plugin costs per test, against the same suite run bare.

A generated suite of N trivial tests (one parametrized pytest function, and with `--unittest`
also N/2 TestCase methods), run by this interpreter's pytest on the host, without and with
`inhabit/grading/seal_plugin.py` loaded (`-p`): the plugin's runner snapshot, audit hook and the
verifications before and after every report, which grading pays on every required test. Prints a
table (median of `--reps` runs each) with the overhead per test and the ratio to the bare run;
`--compare FILE` also times another version of the plugin (e.g. `git show REV:src/inhabit/tasks/
seal_plugin.py > old.py`) in the same run. Sealed runs pass `-o enable_assertion_pass_hook=true`
as grading does (the plugin then judges every passing `==`); `--asserts K` makes each test also
compare K small lists of the test's values with `==`, `--objects K` two objects of a class of the
workspace's (`spans.Span`, whose equality the plugin probes: same-type equality). `--grading` runs the plugins as grading
loads them: a key, the test files listed and `grading` set (the test modules compiled up front and
emptied on disk, the seal-state check, the process ended at the seal), the suite written afresh
before each run.

    PYTHONPATH=src .venv/bin/python bench/seal.py [--tests 500] [--reps 3] [--unittest] [--asserts K] [--compare FILE] [--grading]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

PLUGIN = Path(__file__).resolve().parents[1] / "src" / "inhabit" / "grading" / "seal_plugin.py"


# The code under test's own class for `--objects`: a Span whose equality is the workspace's.
SPANS = """class Span:
    def __init__(self, start, end):
        self.start, self.end = start, end

    def __eq__(self, other):
        return isinstance(other, Span) and (self.start, self.end) == (other.start, other.end)

    __hash__ = None
"""


def write_suite(
    root: Path, n: int, unittest_style: bool, compare: Path | None, asserts: int = 0, objects: int = 0
) -> None:
    tests = root / "tests"
    tests.mkdir(exist_ok=True)
    equal = "    assert [i, (i, str(i))] == [i, (i, str(i))]\n" * asserts
    equal += "    assert Span(i, i + 1) == Span(i, i + 1)\n" * objects
    (root / "spans.py").write_text(SPANS)
    (tests / "test_many.py").write_text(
        "import pytest\n\nfrom spans import Span\n\n\n"
        f"@pytest.mark.parametrize('i', range({n}))\ndef test_value(i):\n    assert i >= 0\n{equal}"
    )
    if unittest_style:
        methods = "".join(
            f"    def test_m{i}(self):\n        self.assertEqual({i} + 1, {i + 1})\n\n" for i in range(n // 2)
        )
        (tests / "test_cases.py").write_text(
            f"import unittest\n\n\nclass TestMany(unittest.TestCase):\n{methods}"
        )
    shutil.copy(PLUGIN, root / "bench_seal.py")
    if compare is not None:
        shutil.copy(compare, root / "bench_seal_other.py")


def run(root: Path, plugin: str | None, grading: dict | None = None) -> float:
    if grading is not None:  # grading's cfg.json, read and deleted by the plugin; the suite afresh
        write_suite(root, **grading["suite"])
        files = sorted(str(p.relative_to(root)) for p in (root / "tests").glob("*.py"))
        (root / "cfg.json").write_text(json.dumps({"key": "ab" * 32, "test_files": files, "grading": True}))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]
    if plugin:
        cmd[3:3] = ["-p", plugin, "-o", "enable_assertion_pass_hook=true"]
    t0 = time.perf_counter()
    proc = subprocess.run(
        cmd, cwd=root, capture_output=True, text=True, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}
    )
    elapsed = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"pytest failed ({plugin or 'bare'}):\n{proc.stdout[-2000:]}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tests", type=int, default=500)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--unittest", action="store_true", help="Also N/2 unittest.TestCase methods.")
    ap.add_argument("--asserts", type=int, default=0, help="`==` comparisons of small lists per test.")
    ap.add_argument(
        "--objects", type=int, default=0, help="`==` of two objects of a workspace class per test."
    )
    ap.add_argument("--compare", type=Path, help="Another seal_plugin.py to time in the same run.")
    ap.add_argument("--grading", action="store_true", help="Load the plugins as grading does (see above).")
    args = ap.parse_args()
    n = args.tests + (args.tests // 2 if args.unittest else 0)
    with tempfile.TemporaryDirectory(prefix="inhabit-bench-seal-") as tmp:
        root = Path(tmp)
        suite = {
            "n": args.tests,
            "unittest_style": args.unittest,
            "compare": args.compare,
            "asserts": args.asserts,
            "objects": args.objects,
        }
        write_suite(root, **suite)
        grading = {"suite": suite} if args.grading else None
        bare = statistics.median(run(root, None) for _ in range(args.reps))
        sealed = statistics.median(run(root, "bench_seal", grading) for _ in range(args.reps))
        other = (
            statistics.median(run(root, "bench_seal_other", grading) for _ in range(args.reps))
            if args.compare
            else None
        )
    mode = ", as grading loads it" if args.grading else ""
    table = Table(title=f"seal plugin: {n} tests, median of {args.reps} runs{mode}")
    for col in ("run", "wall s", "per test ms"):
        table.add_column(col, justify="right" if col != "run" else "left")
    table.add_row("bare pytest (baseline)", f"{bare:.2f}", f"{bare / n * 1000:.2f}")
    table.add_row("with the seal plugin", f"{sealed:.2f}", f"{sealed / n * 1000:.2f}")
    table.add_row("overhead", f"{sealed - bare:.2f}", f"{(sealed - bare) / n * 1000:.2f}")
    if other is not None:
        table.add_row(f"with {args.compare.name}", f"{other:.2f}", f"{other / n * 1000:.2f}")
    Console().print(table)
    print(f"ratio sealed / bare: {sealed / bare:.2f}x")
    if other is not None:
        print(
            f"overhead per test, {args.compare.name} / this plugin: {(other - bare) / max(sealed - bare, 1e-9):.2f}x"
        )


if __name__ == "__main__":
    main()
