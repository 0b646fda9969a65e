"""Which tests run which lines: one run of the suite under `coverage` with a context per test, so a
task build on a slow suite runs only the tests that execute the mutated function (the full suite
confirms each kept task).

The plugin below is written into the sandbox's workspace under a dot-directory for that one run
and removed after; it switches coverage's dynamic context to each test's node id and, at the end,
writes {file: {line: [test index, ...]}, "__tests__": [node ids]} as JSON. The run pins
PYTHONHASHSEED and turns address randomization off like every test run (`testrun.HASH_SEED`,
`testrun.NO_ASLR_PROBE`), so its node ids are the baseline's.
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Iterable
from pathlib import Path

from inhabit.grading.testrun import HASH_SEED, NO_ASLR_PROBE
from inhabit.sandbox.base import Sandbox

__all__ = ["CoverageMap", "build_coverage_map"]

_PLUGIN = """
import json, os
import coverage
import pytest

_cov = coverage.Coverage(data_file=None, source=[os.getcwd()], omit=["*/.inhabit-covmap-*/*"])
_cov.start()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _cov.switch_context(item.nodeid)
    yield
    _cov.switch_context("")


def pytest_sessionfinish(session):
    _cov.stop()
    data = _cov.get_data()
    tests, index, out = [], {}, {}
    for path in data.measured_files():
        rel = os.path.relpath(path)
        lines = {}
        for line, contexts in data.contexts_by_lineno(path).items():
            ids = []
            for c in contexts:
                if c:
                    if c not in index:
                        index[c] = len(tests)
                        tests.append(c)
                    ids.append(index[c])
            if ids:
                lines[str(line)] = ids
        if lines:
            out[rel] = lines
    out["__tests__"] = tests
    with open(os.environ["INHABIT_COVMAP_OUT"], "w") as f:
        json.dump(out, f)
"""


def _coverage_package() -> list[tuple[str, bytes]]:
    """(path under a folder on sys.path, bytes) of every file of the `coverage` package inhabit
    runs with."""
    import coverage

    top = Path(coverage.__file__).parent
    return [
        (f"coverage/{p.relative_to(top).as_posix()}", p.read_bytes())
        for p in sorted(top.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    ]


class CoverageMap:
    """Lines to tests, per file (paths relative to the workspace root)."""

    def __init__(self, data: dict) -> None:
        self.tests: list[str] = data.pop("__tests__", [])
        self.files: dict[str, dict[int, list[int]]] = {
            path: {int(k): v for k, v in lines.items()} for path, lines in data.items()
        }

    def covered_lines(self, tests: Iterable[str]) -> dict[str, set[int]]:
        """Per file, the lines that at least one of `tests` runs."""
        names = set(tests)
        wanted = {i for i, name in enumerate(self.tests) if name in names}
        return {
            path: {line for line, ids in by_line.items() if not wanted.isdisjoint(ids)}
            for path, by_line in self.files.items()
        }

    def tests_for(self, path: str, lines: Iterable[int]) -> set[str]:
        by_line = self.files.get(path, {})
        return {self.tests[i] for line in lines for i in by_line.get(line, ())}


async def build_coverage_map(sandbox: Sandbox, command: str, *, timeout_s: float) -> CoverageMap | None:
    """Run the suite once under coverage in `sandbox`; None when that run produced no map (e.g.
    `coverage` is not importable by the sandbox's python)."""
    token = secrets.token_hex(6)
    folder, out = f".inhabit-covmap-{token}", f".inhabit-covmap-{token}.json"
    await sandbox.write_file(f"{folder}/inhabit_covmap.py", _PLUGIN)
    script = f"{command} -p inhabit_covmap --tb=no >/dev/null 2>&1"
    try:
        probe = await sandbox.exec(
            ["sh", "-c", f'PYTHONPATH="$PWD/{folder}" python -c "import coverage"'], timeout_s=60
        )
        if not probe.ok:
            # A task environment without coverage (its tests never asked for it): this one run
            # gets inhabit's own copy beside the plugin (pure Python where its C tracer does not
            # fit the interpreter). The folder is left out of what is measured, and removed.
            for rel, data in _coverage_package():
                await sandbox.write_file(f"{folder}/{rel}", data)
        await sandbox.exec(
            [
                "sh",
                "-c",
                NO_ASLR_PROBE
                + f'PYTHONHASHSEED={HASH_SEED} PYTHONPATH="$PWD/{folder}" INHABIT_COVMAP_OUT="$PWD/{out}" '
                + f"$norand sh -c {shlex.quote(script)}",
            ],
            timeout_s=timeout_s,
        )
        try:
            raw = await sandbox.read_file(out)
        except FileNotFoundError:
            return None
        return CoverageMap(json.loads(raw))
    finally:
        await sandbox.delete_file(folder)
        await sandbox.delete_file(out)
