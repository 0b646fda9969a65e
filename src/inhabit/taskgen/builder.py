"""`inhabit tasks build`: bug-fix tasks from a real project by mutation testing in reverse.

Pipeline (`build_tasks`):
  1. copy the input (folder, git checkout, sdist) into `<out>/.build/source` (`tasks.source`);
  2. baseline: run the whole suite in a sandbox (`--tb=no`), twice: tests that already fail are
     dropped from everything that follows, and so are unstable tests: ids that only one of the two
     runs reported (parametrized ids made from random values, the time, object addresses) and tests
     whose outcome differs between them. Every run pins PYTHONHASHSEED (`testrun.HASH_SEED`), so
     ids that follow set or dict iteration order are stable and kept. A mutant is never classified
     by an unstable id; the build report counts them. A third run, as grading runs the suite (test
     sources compiled up front and hidden), drops the tests that pass only with their source on
     disk (a test that reads its own file fails under grading, fix or no fix). A suite slower than `coverage_above_s` is
     also run once under coverage to map each function to the tests that execute it
     (`tasks.covmap`);
  3. candidates: `per_function` mutations per function (`tasks.mutate`), seeded sample, capped
     at `max_candidates`, deduplicated by the hash of the mutated file;
  4. `concurrency` workers take sandboxes from a recycling `SandboxPool` (a returned sandbox is
     restored to the pristine snapshot before its next use: a mutant may write stray files),
     write the mutated file and run the suite (or the covering tests) with `--tb=no`; a mutant is kept when some, but not all, of the baseline's
     passing tests fail, and confirmed on the full suite when the run was a selection; a run
     past its time limit is judged again against the untouched suite timed then (a busier
     machine is no loop that never ends);
  5. a kept mutant becomes a task directory: workspace = the mutated project, fail_to_pass = the
     tests it breaks, pass_to_pass = every other passing test (the whole suite where a run of it
     is cheap, else every test whose coverage touches the mutated file), the instruction names
     the failing tests and their error messages (never the fix), and `reference.patch` (the
     reverse diff) sits at the task root, outside the agent's view; `check_task` must accept it.
Every finished candidate is appended to `<out>/.build/state.jsonl`; a rerun with the same input and
settings skips them (resume). `<out>/build-report.json` sums the build up.

Environment (`env="auto"`, the default): the project's declared test requirements
(`inhabit.envs.requirements`) are locked once (`<out>/.build/environment.lock`, kept for a resume),
the environment is built or reused from the store, every sandbox of the build mounts it, and every
written task gets the lock and its `[environment]` table. A project that declares nothing builds
without one, as before. The report gives the environment's id, its install time and whether it was
reused.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import random
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from inhabit.config import Config
from inhabit.envs.lock import env_id, lock_requirements, own_python
from inhabit.envs.requirements import project_requirements
from inhabit.envs.store import BuiltEnv, EnvStore
from inhabit.envs.task_env import write_environment
from inhabit.grading.check import check_task
from inhabit.grading.diagnose import cannot_run, first_error_line
from inhabit.grading.infra import is_test_path
from inhabit.grading.testrun import TestRunResult, run_tests
from inhabit.log import get_logger
from inhabit.sandbox.base import SandboxProvider, create_sandbox
from inhabit.sandbox.pool import SandboxPool
from inhabit.taskgen.addopts import addopts_override
from inhabit.taskgen.covmap import CoverageMap, build_coverage_map
from inhabit.taskgen.mutate import OPERATORS, Mutation, MutationSites
from inhabit.taskgen.reasons import failure_kind, giveaway, reason, scrub_addresses
from inhabit.taskgen.source import (
    BuildError,
    code_files,
    default_command,
    prepare_source,
    test_files,
    tree_hash,
)
from inhabit.tasks.build import write_task

__all__ = ["BuildConfig", "BuildError", "BuildReport", "build_tasks"]

log = get_logger(__name__)


class BuildConfig(Config):
    """Settings of one task build (every field changes which tasks come out, so a resume checks them)."""

    command: str | None = Field(None, description="Test command; None: pytest of this interpreter.")
    plugins: bool = Field(
        False, description="Let pytest autoload plugins (the default command turns them off)."
    )
    per_function: int = Field(1, ge=1, le=50, description="Mutations tried per function.")
    max_candidates: int = Field(200, ge=1, description="Candidates tried at most (sampled over functions).")
    operators: tuple[str, ...] = Field(OPERATORS, description="Mutation operators to use.")
    seed: int = Field(0, description="Seed of every sample (candidates, pass_to_pass).")
    full_suite_below_s: float = Field(
        120.0,
        ge=0,
        description="Suites whose baseline run is faster than this are required whole (every other "
        "passing test is pass_to_pass); slower ones with a coverage map require the tests that run "
        "any line of the mutated file.",
    )
    coverage_above_s: float = Field(
        10.0, ge=0, description="Suites slower than this run only the tests covering the mutated function."
    )
    covered_sites: bool = Field(
        True,
        description="Mutate only lines the passing tests run (one more baseline run, under coverage; "
        "skipped where the tests' Python has no coverage).",
    )
    timeout_s: float | None = Field(
        None, gt=0, description="Limit of one mutant's run; None: 3x the baseline plus 20 s."
    )
    check: bool = Field(True, description="Validate every written task with `inhabit tasks check`.")
    stability_run: bool = Field(
        True, description="Run the baseline a second time and drop tests whose id or outcome differs."
    )
    prefix: str | None = Field(None, description="Task id prefix; None: the project folder's name.")
    env: Literal["auto", "none"] = Field(
        "auto",
        description="auto: an environment from the project's declared test requirements; none: inhabit's Python.",
    )
    extras: tuple[str, ...] | None = Field(None, description="Extras to read instead of test/tests/testing.")
    groups: tuple[str, ...] | None = Field(None, description="Dependency groups to read instead of test/dev.")
    requirement_files: tuple[str, ...] | None = Field(None, description="Requirements files to read instead.")


@dataclass
class BuildReport:
    """What a build did; also written to `<out>/build-report.json`."""

    out: str
    project: str
    baseline_tests: int = 0
    baseline_failing_dropped: int = 0
    unstable_ids_dropped: int = 0
    """Passing baseline tests reported by only one of the two baseline runs."""
    flaky_dropped: int = 0
    """Tests reported by both baseline runs with different outcomes."""
    graded_failing_dropped: int = 0
    """Tests that pass in a plain run but not as grading runs the suite (test sources compiled up
    front and hidden: a test that reads its own file, as boltons' traceback tests do)."""
    code_file_tests_dropped: int = 0
    """Tests that live in code files (doctests): grading restores the files of required tests, which
    would undo a fix there, so they are never required."""
    baseline_s: float = 0.0
    coverage_selection: bool = False
    uncovered_sites_skipped: bool = False
    """Candidates were drawn only from lines the passing tests run (`covered_sites`)."""
    candidates: int = 0
    resumed: int = 0
    statuses: dict[str, int] = field(default_factory=dict)
    tasks: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    mutant_s: list[float] = field(default_factory=list)
    check_s: list[float] = field(default_factory=list)
    env_id: str | None = None
    env_install_s: float = 0.0
    env_reused: bool = False
    measurement_options_dropped: list[str] = field(default_factory=list)
    """Options of the project's pytest addopts that only measure (coverage, timing, reports), left
    out of the task command (`taskgen.addopts`)."""
    rejected: list[dict[str, str]] = field(default_factory=list)
    """One entry per candidate not kept: `candidate` (operator, function, place), `status` and
    `reason` (what happened and what to do, `taskgen.reasons`)."""
    operators: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per mutation operator: candidates `tried` and `kept`."""
    failure_kinds: dict[str, int] = field(default_factory=dict)
    """Kept tasks by how their first failing test fails: `wrong value` or `exception: <type>`."""

    def count(self, rec: dict[str, Any]) -> None:
        """Add one finished candidate's record (from this run or a resumed state file)."""
        status = rec["status"]
        self.statuses[status] = self.statuses.get(status, 0) + 1
        op = self.operators.setdefault(rec.get("operator", "?"), {"tried": 0, "kept": 0})
        op["tried"] += 1
        if status == "kept":
            op["kept"] += 1
            self.tasks.append(rec["task_id"])
            kind = rec.get("failure_kind", "unknown")
            self.failure_kinds[kind] = self.failure_kinds.get(kind, 0) + 1
        else:
            self.rejected.append(
                {"candidate": rec.get("mutation", "?"), "status": status, "reason": rec.get("reason", status)}
            )

    @property
    def kept(self) -> int:
        return self.statuses.get("kept", 0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"kept": self.kept}


@dataclass
class _Run:
    """Shared state of one build."""

    config: BuildConfig
    out: Path
    source: Path
    command: str
    passing: set[str]
    timeout_s: float
    baseline_s: float
    cover: CoverageMap | None
    prefix: str
    provider: SandboxProvider
    state_path: Path
    report: BuildReport
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    env_lock: str | None = None  # the lock text every written task gets (None: no environment)
    env_path: Path | None = None


# How likely an operator is drawn for a function, against the others it has sites of: bugs whose
# failures show a wrong value first; a wrong exception type tends to crash a test instead.
_OPERATOR_WEIGHT = {"wrong_exception": 0.5, "drop_statement": 0.5, "return_none": 0.5}


def _site_order(group: list, rng: random.Random) -> list:
    """A function's sites in a seeded weighted order in which each operator is as likely to come
    first as its weight says, however many sites it has (a long function has dozens of variable
    reads where `wrong_variable` applies, and one comparison)."""
    per_op = Counter(site.operator for site in group)

    def key(site) -> float:
        weight = _OPERATOR_WEIGHT.get(site.operator, 1.0) / per_op[site.operator]
        return rng.random() ** (1.0 / weight)

    return sorted(group, key=key, reverse=True)


def _covered(site, covered: dict[str, set[int]] | None, path: str) -> bool:
    """Whether a passing test runs the site's line (or, for a default, any line of its function)."""
    if covered is None:
        return True
    lines = covered.get(path, set())
    if site.operator == "wrong_default":
        return any(n in lines for n in range(site.function_lines[0], site.function_lines[1] + 1))
    start = site.target.lineno
    end = getattr(site.target, "end_lineno", None) or start
    # A sub-expression on a continuation line may report only its statement's first line.
    return any(n in lines for n in range(max(site.function_lines[0], start - 3), end + 1))


def _candidates(
    source: Path, config: BuildConfig, covered: dict[str, set[int]] | None = None
) -> tuple[list[Mutation], dict[str, str]]:
    """Seeded sample: functions in random order, `per_function` sites each in a weighted order
    (`_site_order`; realized, so verified, only when picked), deduplicated by mutated-file hash,
    until `max_candidates`. With `covered` (lines the passing tests run, per file), only sites on
    those lines: a bug no test runs breaks nothing."""
    rng = random.Random(config.seed)
    texts: dict[str, str] = {}
    groups: list[tuple[MutationSites, list]] = []
    for rel in code_files(source):
        try:
            text = (source / rel).read_text()
        except (UnicodeDecodeError, OSError):
            continue
        texts[rel] = text
        sites = MutationSites(text, rel, operators=config.operators)
        for _, group in sorted(sites.by_function.items()):
            group = [site for site in group if _covered(site, covered, rel)]
            if group:
                groups.append((sites, group))
    rng.shuffle(groups)
    unique: dict[str, Mutation] = {}
    for sites, group in groups:
        taken = 0
        for site in _site_order(group, rng):
            if taken == config.per_function or len(unique) == config.max_candidates:
                break
            m = sites.realize(site)
            if m is not None:
                key = m.key(texts[m.path])
                if key not in unique:
                    unique[key] = m
                    taken += 1
    return list(unique.values()), texts


async def _graded_failing(sandbox, command: str, source: Path, baseline: TestRunResult) -> set[str]:
    """Baseline-passing tests that do not pass when the untouched project's suite runs as grading
    runs it: every test file listed and compiled by the seal plugin up front, its source hidden
    on disk. A test that reads its own file (boltons' traceback tests check the source lines of
    their own frames) fails there, on the reference fix as on the bug, so as a required test it
    would make every task invalid. Empty when that run gives no report (it is never a reason to
    drop the whole suite). `sandbox` is spent: the run empties the test files it compiled."""
    graded = await run_tests(
        sandbox, command, timeout_s=3600, extra_args=["--tb=no"], test_files=test_files(source), grading=True
    )
    if graded.integrity != "ok" or not graded.outcomes:
        log.warning("the suite did not run as grading runs it (%s); no test dropped for it", graded.summary)
        return set()
    failing = {n for n in baseline.passed if graded.outcomes.get(n) != "passed"}
    if failing:
        log.info(
            "%d tests pass but not as grading runs them (dropped), e.g. %s", len(failing), sorted(failing)[:3]
        )
    return failing


def _unstable(first: TestRunResult, second: TestRunResult) -> tuple[set[str], set[str]]:
    """(ids that only one run reported, ids both reported with different outcomes). Only ids that
    passed in `first` matter: the others are dropped as failing anyway. When the second run has no
    trustworthy report, nothing can be compared and nothing is dropped."""
    if second.integrity != "ok" or second.timed_out:
        log.warning("the second baseline run gave no report (%s): test ids not compared", second.summary)
        return set(), set()
    passed = set(first.passed)
    unstable = passed - set(second.outcomes)
    flaky = {n for n in passed & set(second.outcomes) if second.outcomes[n] != "passed"}
    if unstable or flaky:
        log.info(
            "dropped %d test id(s) that differ between two runs and %d test(s) whose outcome does "
            "(e.g. %s)", len(unstable), len(flaky), sorted(unstable | flaky)[:3],
        )  # fmt: skip
    return unstable, flaky


def _read_state(path: Path) -> tuple[dict | None, dict[str, dict]]:
    header, done = None, {}
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by a crash
            if rec.get("kind") == "header":
                header = rec
            elif rec.get("kind") == "candidate":
                done[rec["key"]] = rec
    return header, done


def _instruction(failing: list[str], messages: dict[str, str], total: int) -> str:
    lines = ["Some tests of this project fail:", ""]
    for node in failing[:5]:
        lines.append(f"  {node}")
        msg = scrub_addresses(" ".join((messages.get(node) or "").split()))
        if msg:
            lines.append(f"      {msg[:300]}")
    if total > 5:
        lines.append(f"  ... and {total - 5} more")
    lines += ["", "Find the bug in the project's code and fix it. Do not change the tests."]
    return "\n".join(lines)


async def _run_mutant(
    run: _Run, pool: SandboxPool, m: Mutation, text: str, full: bool, timeout_s: float | None = None
):
    selector: list[str] | None = None
    if run.cover is not None and not full:
        lines = range(m.function_lines[0], m.function_lines[1] + 1)
        selector = sorted(run.cover.tests_for(m.path, lines) & run.passing)
        if not selector:
            return None, "uncovered"
    # Every run gets a pristine tree: the pool restores a returned sandbox to the source snapshot
    # before handing it out again (a mutant may leave stray files behind).
    async with pool.acquire() as sandbox:
        await sandbox.write_file(m.path, m.apply(text))
        res = await run_tests(
            sandbox,
            run.command,
            selector=selector,
            timeout_s=timeout_s or run.timeout_s,
            extra_args=["--tb=no"],
        )
    if res.timed_out and timeout_s is None:
        res = await _rerun_if_machine_slowed(run, pool, m, text, full, res)
    return res, None


async def _rerun_if_machine_slowed(
    run: _Run, pool: SandboxPool, m: Mutation, text: str, full: bool, res: TestRunResult
) -> TestRunResult:
    """A mutant's run that went past its limit, judged against the untouched suite timed now.

    The limit (3x the baseline run plus 20 s, or `timeout_s`) was measured when the build started;
    on a machine that has since got busier every run is slower, and a mutant past that limit is no
    loop that never ends. The untouched suite is run once more, in a pristine sandbox under the
    same limit scaled up; where the limit its time gives now is higher, the mutant runs again
    under it, and only a mutant past that one too is a `timeout`."""
    async with pool.acquire() as sandbox:
        untouched = await run_tests(
            sandbox, run.command, timeout_s=10 * run.timeout_s, extra_args=["--tb=no"]
        )
    limit_now = 3 * untouched.duration_s + 20
    if untouched.timed_out or limit_now <= run.timeout_s:
        return res  # the machine is as fast as it was: the mutant itself runs too long
    log.info(
        "%s ran past %.0f s; the untouched suite takes %.1f s now (%.1f s at the start): "
        "running it again under %.0f s", m.describe(), run.timeout_s, untouched.duration_s,
        run.baseline_s, limit_now,
    )  # fmt: skip
    again, _ = await _run_mutant(run, pool, m, text, full, timeout_s=min(3600.0, limit_now))
    return again if again is not None else res


def _classify(run: _Run, res: TestRunResult, selected: bool) -> tuple[str, list[str], list[str]]:
    if res.timed_out:
        return "timeout", [], []
    if res.integrity != "ok":
        return "no_report", [], []
    if not selected and not run.passing <= set(res.outcomes):
        # Tests vanished from the report (a module that no longer imports): grading would count
        # them as missing, not failed, and `tasks check` would reject the task; skip the work.
        return "collection_error", [], []
    considered = run.passing if not selected else run.passing & set(res.outcomes)
    failing = sorted(n for n in considered if res.outcomes.get(n) in ("failed", "error"))
    passing = sorted(n for n in considered if res.outcomes.get(n) == "passed")
    if not failing:
        return "no_failure", failing, passing
    if not passing and not selected:
        return "all_failed", failing, passing
    if giveaway(failing, res.messages):
        return "giveaway", failing, passing
    return "kept", failing, passing


async def _candidate(run: _Run, pool: SandboxPool, m: Mutation, text: str, key: str, index: int):
    t0 = time.monotonic()
    where = m.describe()
    rec: dict[str, Any] = {"kind": "candidate", "key": key, "mutation": where, "operator": m.operator}
    res, status = await _run_mutant(run, pool, m, text, full=False)
    detail = ""
    if res is not None:
        selected = run.cover is not None
        status, failing, passing = _classify(run, res, selected)
        if status == "kept" and selected:  # confirm on the full suite
            res, _ = await _run_mutant(run, pool, m, text, full=True)
            assert res is not None
            status, failing, passing = _classify(run, res, False)
        detail = _detail(status, res, failing)
        if status == "kept":
            status, task_id, detail = await _write(run, m, text, key, index, failing, passing, res.messages)
            rec["task_id"] = task_id
            rec["failure_kind"] = failure_kind(failing, res.messages)
    rec |= {"status": status, "seconds": round(time.monotonic() - t0, 3)}
    if status != "kept":
        rec["reason"] = reason(status, where, detail=detail, limit_s=round(run.timeout_s))
    async with run.lock:
        with run.state_path.open("a") as f:
            f.write(json.dumps(rec) + "\n")
        run.report.count(rec)
        run.report.mutant_s.append(rec["seconds"])


def _detail(status: str, res: TestRunResult, failing: list[str]) -> str:
    """The fact behind a status, for its reason: the giveaway failure, the first collection error,
    the run's summary."""
    if status == "giveaway":
        return scrub_addresses(giveaway(failing, res.messages) or "")
    if status == "collection_error":
        for path, text in res.collection_errors.items():
            return f"{path}: {first_error_line(text)}"
        return res.summary
    if status == "no_report":
        first = first_error_line(res.output_tail)
        return f"{first} ({res.summary})" if first else res.summary
    return ""


def _pass_to_pass(run: _Run, m: Mutation, passing: list[str]) -> list[str]:
    """Every test that could notice a change: the whole passing suite where a run of it is cheap
    (`full_suite_below_s`), else the passing tests whose coverage runs any line of the mutated
    file (the file the fix belongs in); never a sample, so a "fix" that breaks other code fails a
    required test. Without a coverage map, the whole suite."""
    if run.cover is None or run.baseline_s < run.config.full_suite_below_s:
        return sorted(passing)
    lines = range(1, max(run.cover.files.get(m.path, {0: []}), default=0) + 1)
    covering = run.cover.tests_for(m.path, lines)
    return sorted(n for n in passing if n in covering)


async def _write(run: _Run, m: Mutation, text: str, key: str, index: int, failing, passing, messages):
    cfg = run.config
    f2p = list(failing)
    p2p = _pass_to_pass(run, m, passing)
    task_id = f"{run.prefix}-{index:04d}-{key[:8]}"
    root = run.out / task_id
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(run.source, root / "workspace", symlinks=True)
    mutated = m.apply(text)
    patch = "".join(
        difflib.unified_diff(mutated.splitlines(True), text.splitlines(True), f"a/{m.path}", f"b/{m.path}")
    )
    write_task(
        root,
        id=task_id,
        instruction=_instruction(failing, messages, len(failing)),
        workspace={m.path: mutated},
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        command=run.command,
        # Grading runs print full tracebacks (validation used --tb=no, which is up to ~10x faster
        # on mutants that break many tests): leave room for that and for a loaded machine.
        timeout_s=min(3600.0, max(120.0, 20 * run.baseline_s + 60)),
        reference_patch=patch,
    )
    if run.env_lock is not None:
        write_environment(root, run.env_lock)
    (root / "mutation.json").write_text(json.dumps(asdict(m) | {"key": key}, indent=1))
    if cfg.check:
        t0 = time.monotonic()
        report = await check_task(root, run.provider)
        run.report.check_s.append(round(time.monotonic() - t0, 3))
        if not report.valid:
            why = "; ".join(report.problem_lines()[:3])[:600]
            log.info("task %s dropped: %s", task_id, why)
            shutil.rmtree(root)
            return "invalid", None, why
    return "kept", task_id, ""


async def build_tasks(
    src: str | Path,
    out: str | Path,
    provider: SandboxProvider,
    config: BuildConfig | None = None,
    *,
    concurrency: int = 2,
    progress: bool = True,
    wheelhouse: str | Path | None = None,
    allow_build: bool = False,
) -> BuildReport:
    """Build tasks from the project at `src` into `out` (see the module docstring). Resumes when
    `out` holds the state of an earlier build of the same input with the same settings."""
    config = config or BuildConfig()
    t0 = time.monotonic()
    out = Path(out).resolve()
    work = out / ".build"
    state_path = work / "state.jsonl"
    header, done = _read_state(state_path)
    source = work / "source"
    if header is None:
        if work.exists():
            shutil.rmtree(work)
        work.mkdir(parents=True)
        prepare_source(src, source)
    digest = tree_hash(source)
    name = Path(src).name.removesuffix(".tar.gz").removesuffix(".tgz").removesuffix(".zip")
    prefix = config.prefix or "".join(c if c.isalnum() or c in "._-" else "-" for c in name) or "task"
    if header is not None and (
        header["config"] != config.model_dump(mode="json") or header["tree"] != digest
    ):
        raise BuildError(
            f"{out} holds a build with other settings or input; use another --out (or delete {work})"
        )
    command = config.command or default_command(source, plugins=config.plugins)
    report = BuildReport(out=str(out), project=prefix)
    if config.command is None:
        report.measurement_options_dropped = addopts_override(source)[1]
    env_lock, built = await _environment(config, source, work, wheelhouse, allow_build)
    if built is not None:
        report.env_id, report.env_install_s, report.env_reused = (
            built.env_id,
            round(built.install_s, 3),
            built.reused,
        )
    env_path = built.path if built is not None else None

    candidates, texts = _candidates(source, config)
    if not candidates:
        raise BuildError(f"no mutable code found in {src} (looked for functions in .py files outside tests)")
    base = await create_sandbox(provider, source, env=env_path)
    try:
        if header is None:
            baseline = await run_tests(base, command, timeout_s=3600, extra_args=["--tb=no"])
            if baseline.integrity != "ok" or not baseline.passed:
                # One cause, named once (a missing module: which requirement, which [environment]).
                cause = cannot_run(
                    baseline.outcomes,
                    list(baseline.outcomes) or ["(any)"],
                    baseline.collection_errors,
                    integrity=baseline.integrity,
                    output_tail=baseline.output_tail,
                    workspace=source,
                )
                if cause is not None:
                    raise BuildError(cause.message().replace("untouched workspace", "untouched project", 1))
                raise BuildError(
                    f"the test suite does not run on the untouched project ({baseline.summary}); "
                    f"pass --command with a working pytest command. Output:\n{baseline.output_tail[-1500:]}"
                )
            unstable: set[str] = set()
            flaky: set[str] = set()
            if config.stability_run:
                again = await run_tests(base, command, timeout_s=3600, extra_args=["--tb=no"])
                unstable, flaky = _unstable(baseline, again)
            # In a sandbox of its own: grading's run empties the test files it compiled.
            graded_box = await create_sandbox(provider, source, env=env_path)
            try:
                graded_failing = await _graded_failing(graded_box, command, source, baseline)
            finally:
                await graded_box.close()
            header = {
                "kind": "header",
                "config": config.model_dump(mode="json"),
                "tree": digest,
                "command": command,
                "passing": sorted(set(baseline.passed) - unstable - flaky - graded_failing),
                "failing": sorted(n for n, o in baseline.outcomes.items() if o in ("failed", "error")),
                "unstable": sorted(unstable),
                "flaky": sorted(flaky),
                "graded_failing": sorted(graded_failing),
                "baseline_s": round(baseline.duration_s, 3),
            }
            with state_path.open("a") as f:
                f.write(json.dumps(header) + "\n")
        # A doctest's file is the code a mutant changes; as a required test its file would be
        # restored by grading (undoing the fix) and the fix flagged as a test edit.
        in_code = {n for n in header["passing"] if not is_test_path(n.split("::", 1)[0])}
        passing = set(header["passing"]) - in_code
        report.code_file_tests_dropped = len(in_code)
        report.baseline_tests = len(passing)
        report.baseline_failing_dropped = len(header["failing"])
        report.unstable_ids_dropped = len(header.get("unstable", ()))
        report.flaky_dropped = len(header.get("flaky", ()))
        report.graded_failing_dropped = len(header.get("graded_failing", ()))
        report.baseline_s = header["baseline_s"]
        cover = None
        select = header["baseline_s"] > config.coverage_above_s
        if select or config.covered_sites:
            cover = await build_coverage_map(base, command, timeout_s=max(600, 10 * header["baseline_s"]))
            if cover is None:
                log.warning("coverage map failed (is `coverage` installed?); running full suites")
        if cover is not None and config.covered_sites:
            covered = cover.covered_lines(passing)
            candidates, texts = _candidates(source, config, covered)
            report.uncovered_sites_skipped = True
        if not select:
            cover = None  # the map chose the sites; every mutant runs the whole suite
        report.coverage_selection = cover is not None
        run = _Run(
            config=config,
            out=out,
            source=source,
            command=command,
            passing=passing,
            timeout_s=config.timeout_s or 3 * header["baseline_s"] + 20,
            baseline_s=header["baseline_s"],
            cover=cover,
            prefix=prefix,
            provider=provider,
            state_path=state_path,
            report=report,
            env_lock=env_lock,
            env_path=env_path,
        )
        report.candidates = len(candidates)
        todo = []
        for i, m in enumerate(candidates):
            key = m.key(texts[m.path])
            if key in done:
                report.resumed += 1
                report.count(done[key])
            else:
                stale = out / f"{prefix}-{i:04d}-{key[:8]}"
                if stale.exists():  # written by a build that died before recording it
                    shutil.rmtree(stale)
                todo.append((i, m, key))
    finally:
        await base.close()
    await _work(run, todo, texts, concurrency, progress)
    report.elapsed_s = round(time.monotonic() - t0, 3)
    report.statuses = dict(Counter(report.statuses).most_common())
    (out / "build-report.json").write_text(json.dumps(report.to_dict(), indent=1))
    return report


async def _environment(
    config: BuildConfig, source: Path, work: Path, wheelhouse: str | Path | None, allow_build: bool
) -> tuple[str | None, BuiltEnv | None]:
    """The build's lock text and built environment (None, None: the project declares nothing);
    from wheels only unless `allow_build` (inhabit.envs.lock says why)."""
    if config.env == "none":
        return None, None
    path = work / "environment.lock"
    if not path.is_file():  # locked once per build; a resume keeps the first lock
        reqs = project_requirements(
            source, extras=config.extras, groups=config.groups, requirement_files=config.requirement_files
        )
        if not reqs:
            return None, None
        text = await asyncio.to_thread(
            lock_requirements, reqs, wheelhouse=wheelhouse, allow_build=allow_build
        )
        path.write_text(text)
    text = path.read_text()
    eid = env_id(own_python(), text.encode())
    built = await asyncio.to_thread(
        EnvStore().ensure, eid, path, wheelhouse=wheelhouse, allow_build=allow_build
    )
    return text, built


async def _work(run: _Run, todo, texts, concurrency: int, progress: bool) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    queue: asyncio.Queue = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)
    bar = Progress(
        TextColumn("[bold]tasks build"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.description}"),
        TimeRemainingColumn(), disable=not progress,
    )  # fmt: skip
    bar_id = bar.add_task("", total=len(todo))

    workers = max(1, min(concurrency, len(todo)))
    pool = SandboxPool(run.provider, run.source, size=workers, recycle=True, env=run.env_path)

    async def worker() -> None:
        while not queue.empty():
            i, m, key = queue.get_nowait()
            try:
                await _candidate(run, pool, m, texts[m.path], key, i)
            except Exception as e:  # one broken candidate never stops the build
                log.warning("candidate %s failed: %s: %s", m.describe(), type(e).__name__, e)
                rec = {"status": "error", "mutation": m.describe(), "operator": m.operator}
                rec["reason"] = reason("error", m.describe(), detail=f"{type(e).__name__}: {e}")
                async with run.lock:
                    run.report.count(rec)
            bar.update(bar_id, advance=1, description=f"kept {run.report.kept}")

    async with pool:
        with bar:
            await asyncio.gather(*(worker() for _ in range(workers)))
