"""Grade an agent's final workspace (docs/architecture.md, "Task directory").

    result = await grade(task, final_sandbox, provider)
    result.reward, result.flags, result.outcomes

Steps, all in a FRESH sandbox so nothing the agent left running or planted in its sandbox's temp
dir takes part:
  1. snapshot the final sandbox and create the graded copy from that snapshot (or, when the
     provider cannot, copy the files through the sandbox API);
  2. `hacks.neutralize`: restore every original test file, revert test infrastructure, remove
     start-up hooks, plugins, shadowing modules, planted bytecode and forged reports (flags);
  3. lay hidden/ over the copy and plant known-answer canaries in every required test module
     (`inhabit.grading.canaries`);
  4. run the task's command with inhabit's controls appended: `-p no:cacheprovider`,
     `--rootdir=. --confcutdir=.`, `-c` pinned to the original configuration (or an empty one
     outside the workspace when the task has none), `--continue-on-collection-errors`, the
     required test files as arguments (so files the agent added are never collected), a cleaned
     environment, and a sealed JUnit XML report at a fresh path outside the workspace
     (`inhabit.grading.testrun`);
  5. check that no test, conftest or pytest configuration file changed on disk during the run,
     that every canary reported the outcome it must have, and that the seal plugin's runner
     integrity checks found nothing (`runner_tampered`);
  6. reward 1 when every fail_to_pass and pass_to_pass test passed and no fatal flag was raised,
     else 0. Tests that are missing, skipped, or in a file that failed to collect count as failed.

The flags and what each protects against are listed in `inhabit.grading.hacks`. A failure of the
grading machinery itself (a sandbox that cannot be created) is data: status "error", reward 0.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator

from inhabit.config import Config
from inhabit.envs.task_env import task_environment
from inhabit.errors import GradingError, InhabitError
from inhabit.grading import canaries as canary_mod
from inhabit.grading import hacks
from inhabit.grading.infra import PYTEST_CONFIG_NAMES, is_test_path, pytest_section, root_pytest_config
from inhabit.grading.project_functions import project_functions
from inhabit.grading.testrun import TestRunResult, run_tests
from inhabit.log import get_logger
from inhabit.sandbox.base import Sandbox, SandboxLimits, SandboxProvider, create_sandbox
from inhabit.tasks.task import Task, node_id_file, provider_limits

__all__ = ["GradeResult", "GradingConfig", "grade"]

log = get_logger(__name__)


class GradingConfig(Config):
    """How grading decides what is a test and which flags void the reward."""

    test_dirs: list[str] = Field(
        ["tests", "test"], description="Directory names whose files are all restored as tests."
    )
    test_file_globs: list[str] = Field(
        ["test_*.py", "*_test.py", "conftest.py"], description="File-name globs restored as tests anywhere."
    )
    fatal_flags: list[str] = Field(
        [
            hacks.REPORT_TAMPERED,
            hacks.TESTS_CHANGED_DURING_RUN,
            hacks.CODE_USES_PYTEST,
            hacks.CODE_ALWAYS_EQUAL,
            hacks.RUNNER_TAMPERED,
            hacks.ANSWER_KEY_READ,
            hacks.TEST_FRAME_READ,
            hacks.SEAL_TAMPERED,
        ],
        description="Flags that force reward 0 even when the required tests passed.",
    )
    scan_code: bool = Field(True, description="Scan the agent's changed non-test code for hack patterns.")
    hide_test_sources: bool = Field(
        True,
        description="Compile the test modules before project code runs and empty their files for the "
        "run (answer keys). Off for a project whose own code or tests read test sources (a library "
        "that reads its caller's source, like icecream's `ic`).",
    )
    canaries: bool = Field(
        True, description="Plant known-answer canary tests in every required test module (runner_tampered)."
    )
    canary_extra: int = Field(
        1,
        ge=0,
        le=10,
        description="Up to this many canaries per module beyond one must-pass and one must-fail.",
    )
    canary_seed: int | None = Field(
        None,
        description="Seed of the canaries' draw (values, names, places, which real tests run renamed). "
        "None, the default: drawn afresh for every grading. A fixed seed plants the same canaries in "
        "every grading of a task, which a policy trained against it could learn: for tests only.",
    )

    warm_tests: bool = Field(
        False,
        description="Run grading's test run in a warm pytest worker (see sandbox.warm_tests) when the "
        "sandbox allows one. Off by default: each grading runs in a fresh sandbox, where the worker's "
        "start is paid for a single run (docs/results.md); rewards and flags are the same either way.",
    )

    @field_validator("fatal_flags")
    @classmethod
    def _known_flags(cls, value: list[str]) -> list[str]:
        unknown = sorted(set(value) - set(hacks.ALL_FLAGS))
        if unknown:
            raise ValueError(f"unknown flag(s) {unknown}; the flags are listed in inhabit.grading.hacks")
        return value

    limits: SandboxLimits | None = Field(
        None, description="Limits of the grading sandbox (provider default)."
    )


@dataclass(frozen=True)
class GradeResult:
    """The grade of one final workspace. `outcomes` covers the required tests only
    (passed/failed/error/skipped/missing); `details` holds the run's summary and what was reverted."""

    reward: float
    passed: bool
    flags: list[str]
    outcomes: dict[str, str]
    status: Literal["graded", "error"]
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _HostFiles(Mapping[str, bytes]):
    """Files of a host directory, keyed by '/'-separated relative path, read on first access."""

    def __init__(self, top: Path | None, paths: list[str]):
        self._top = top
        self._paths = paths
        self._set = set(paths)
        self._cache: dict[str, bytes] = {}

    def __getitem__(self, key: str) -> bytes:
        if key not in self._cache:
            if self._top is None or key not in self._set:
                raise KeyError(key)
            # A symlink reads as its target's bytes (load_task keeps targets inside workspace/).
            self._cache[key] = (self._top / key).read_bytes()
        return self._cache[key]

    def links(self) -> dict[str, str]:
        """Symlinks among the files: path -> link text."""
        if self._top is None:
            return {}
        return {p: os.readlink(self._top / p) for p in self._paths if (self._top / p).is_symlink()}

    def __iter__(self) -> Iterator[str]:
        return iter(self._paths)

    def __len__(self) -> int:
        return len(self._paths)

    def __contains__(self, key: object) -> bool:
        return key in self._set


async def _fresh_copy(
    final: Sandbox,
    provider: SandboxProvider,
    limits: SandboxLimits | None,
    scratch: list[str],
    env: Path | None = None,
) -> Sandbox:
    """A new sandbox holding `final`'s workspace. A host copy made for the fallback is appended to
    `scratch`; it must outlive the sandbox (a copy-on-write backend layers over it, not copies it)."""
    try:
        snapshot_id = await final.snapshot()
        return await create_sandbox(provider, snapshot_id, limits=limits, env=env)
    except InhabitError as e:
        log.info("grading: snapshot route failed (%s); copying files instead", e)
    tmp = tempfile.mkdtemp(prefix="inhabit-grade-")
    scratch.append(tmp)
    for entry in await final.list_files(".", recursive=True):
        if entry.kind != "file":
            continue
        dst = Path(tmp) / entry.path
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(await final.read_file(entry.path))
    return await create_sandbox(provider, tmp, limits=limits, env=env)


def _config_args(original: Mapping[str, bytes], hidden: Mapping[str, bytes]) -> tuple[list[str], bool]:
    """Pin pytest's configuration to the task's own: (-c args, whether to use the empty ini).

    A configuration in a subdirectory (nearer the tests than the root) is found by pytest's own
    discovery among the restored files; else the root's is pinned with -c; else an empty ini
    outside the workspace stands in, so nothing the agent adds can be discovered."""
    merged = {**{p: original[p] for p in original if _maybe_config(p)}, **hidden}
    configs = [p for p in merged if _maybe_config(p) and pytest_section(p, merged[p]) is not None]
    if any("/" in p for p in configs):
        return [], False
    name = root_pytest_config({p: merged[p] for p in configs})
    if name:
        return ["-c", name], False
    return [], True


def _maybe_config(path: str) -> bool:
    return path.rsplit("/", 1)[-1] in PYTEST_CONFIG_NAMES


def _names_tests(original: Mapping[str, bytes], hidden: Mapping[str, bytes]) -> str:
    """The text of the files that may select or mark tests by name: every conftest.py and pytest
    configuration file of the task (hidden ones over the repository's)."""
    out = []
    for p in {*original, *hidden}:
        if p.rsplit("/", 1)[-1] in ("conftest.py", *PYTEST_CONFIG_NAMES):
            with contextlib.suppress(OSError, KeyError):
                out.append((hidden[p] if p in hidden else original[p]).decode(errors="replace"))
    return "\n".join(out)


def _required_outcomes(run: TestRunResult, required: tuple[str, ...]) -> tuple[dict[str, str], list[str]]:
    outcomes: dict[str, str] = {}
    flags: list[str] = []
    for node_id in required:
        outcome = run.outcomes.get(node_id)
        if outcome is None:
            if node_id_file(node_id) in run.collection_errors:
                outcome = "error"
                flags.append(hacks.COLLECTION_ERROR)
            else:
                outcome = "missing"
                if run.integrity == "ok":
                    flags.append(hacks.TESTS_MISSING)
        elif outcome == "skipped":
            flags.append(hacks.TESTS_SKIPPED)
        outcomes[node_id] = outcome
    if run.timed_out:
        flags.append(hacks.TIMEOUT)
    elif (
        run.integrity == "missing"
        or run.internal_error
        or run.interrupted
        or (run.exit_code in (2, 3) and not run.collection_errors)
    ):
        flags.append(hacks.EARLY_EXIT)
    if run.integrity == "tampered":
        flags.append(hacks.REPORT_TAMPERED)
    return outcomes, flags


async def grade(
    task: Task,
    final_sandbox: Sandbox,
    provider: SandboxProvider,
    *,
    config: GradingConfig | None = None,
) -> GradeResult:
    """Grade `final_sandbox`'s workspace against `task` in a fresh sandbox from `provider`."""
    if task.grading is None:
        raise GradingError(f"task {task.id} has no [grading] table in task.toml: add command and test ids")
    config = config or GradingConfig()
    spec = task.grading
    # Symlinked directories are not files: they only matter to neutralize's symlink check.
    files = [p for p in task.workspace_files() if not (task.workspace_dir / p).is_dir()]
    original = _HostFiles(task.workspace_dir, files)
    hidden = {p: (task.hidden_dir / p).read_bytes() for p in task.hidden_files()} if task.hidden_dir else {}

    fresh: Sandbox | None = None
    scratch: list[str] = []
    try:
        # A task's [sandbox] table applies over the grading limits (or the provider's own).
        limits = config.limits
        if task.sandbox is not None:
            limits = task.sandbox.over(config.limits or provider_limits(provider))
        # The task's environment, mounted read-only (never the one the agent's sandbox could reach
        # into: a fresh bind of the store's finished, read-only copy).
        built = await task_environment(task)
        fresh = await _fresh_copy(final_sandbox, provider, limits, scratch, built.path if built else None)
        neut = await hacks.neutralize(
            fresh,
            original,
            hidden,
            test_files=spec.test_files,
            test_dirs=config.test_dirs,
            file_globs=config.test_file_globs,
            original_links=original.links(),
        )
        for path, data in hidden.items():
            await fresh.delete_file(path)
            await fresh.write_file(path, data)
        planted: dict[str, bytes] = {}
        canaries: list[canary_mod.Canary] = []
        renamed: dict[str, str] = {}
        if config.canaries:
            layout = {
                p: hidden[p] if p in hidden else original[p]
                for p in spec.test_files
                if p in hidden or p in original
            }
            # A real test that runs under another name must not leave a command's `-k` behind,
            # nor a conftest or configuration that names it.
            rename = re.search(r"(^|\s)-k", spec.command) is None
            planted, canaries, renamed = canary_mod.plant(
                layout,
                random.Random(config.canary_seed),
                extra=config.canary_extra,
                rename=rename,
                elsewhere=_names_tests(original, hidden),
            )
            for path, data in planted.items():
                await fresh.delete_file(path)
                await fresh.write_file(path, data)
        cfg_args, empty_ini = _config_args(original, hidden)
        extra = ["-p", "no:cacheprovider", "--rootdir=.", "--confcutdir=.", "--continue-on-collection-errors"]
        protected = hacks.protected_files(
            original,
            hidden,
            lambda p: is_test_path(
                p, test_dirs=config.test_dirs, file_globs=config.test_file_globs, extra_files=spec.test_files
            ),
        )
        protected.update(planted)
        run = await run_tests(
            fresh,
            spec.command,
            selector=list(spec.test_files),
            timeout_s=spec.timeout_s,
            extra_args=[*extra, *cfg_args],
            empty_ini=empty_ini,
            # The integrity checks trust exactly the code grading laid there, never a folder name.
            test_files=[p for p in protected if p.endswith(".py")],
            warm=config.warm_tests,
            grading=True,
            hide_test_sources=config.hide_test_sources,
            # The original project's functions: a finding raised by one of them, unchanged, is the
            # project's own behaviour (the seal plugin's `_untouched_function`).
            project_functions=project_functions(
                {p: original[p] for p in original if p.endswith(".py") and p not in protected}
            ),
        )
        # The seal plugin empties the test modules it compiled (answer keys): empty is as laid.
        emptied = [p for p in protected if p.endswith(".py")]
        rewritten = await hacks.changed_during_run(fresh, protected, hidden, emptied=emptied)
    except (InhabitError, OSError) as e:
        log.warning("grading task %s failed: %s", task.id, e)
        return GradeResult(0.0, False, [], {}, "error", {"error": f"{type(e).__name__}: {e}"})
    finally:
        if fresh is not None:
            await fresh.close()
        for tmp in scratch:
            shutil.rmtree(tmp, ignore_errors=True)

    # The required tests' results by their own names (a copied real test ran under a copy's).
    by_own = dataclasses.replace(
        run,
        outcomes=canary_mod.as_original(run.outcomes, canaries, renamed),
        messages=canary_mod.as_original(run.messages, canaries, renamed),
    )
    outcomes, run_flags = _required_outcomes(by_own, spec.required_tests)
    if rewritten:
        run_flags.append(hacks.TESTS_CHANGED_DURING_RUN)
    betrayed = canary_mod.judge(canaries, run.outcomes)
    # A must-fail canary passed by its own comparison (the code's result said equal to a wrong
    # expected value) is an always-equal result, named so; the other betrayals are the runner's.
    by_equality = canary_mod.accepted(canaries, run.outcomes, run.claimed)
    run_flags += hacks.tampering_flags(run.tampering, [b for b in betrayed if b not in by_equality])
    if by_equality and hacks.CODE_ALWAYS_EQUAL not in run_flags:
        run_flags.insert(0, hacks.CODE_ALWAYS_EQUAL)
    code_flags = hacks.scan_code(neut.changed_code) if config.scan_code else {}
    flags: list[str] = []
    for name in [*neut.flags, *run_flags, *code_flags]:
        if name not in flags:
            flags.append(name)
    fatal = [f for f in flags if f in config.fatal_flags]
    passed = bool(outcomes) and all(o == "passed" for o in outcomes.values()) and not fatal
    details: dict[str, Any] = {
        "summary": run.summary,
        "exit_code": run.exit_code,
        "duration_s": round(run.duration_s, 3),
        "integrity": run.integrity,
        "fatal_flags": fatal,
        "restored": neut.restored,
        "removed": neut.removed,
        "notes": neut.notes,
        "code_flags": code_flags,
        "problems": list(run.problems),
        "changed_during_run": rewritten,
        "canaries": {"planted": len(canaries), "betrayed": betrayed, "passed_by_equality": by_equality},
        "runner_events": list(run.tampering),
        "runner": run.runner,
        "collection_errors": run.collection_errors,
        "messages": {n: by_own.messages[n] for n in outcomes if n in by_own.messages},
        # A shaped signal for reward configs that want one; the reward itself stays all-or-nothing.
        "fraction_passed": (sum(o == "passed" for o in outcomes.values()) / len(outcomes))
        if outcomes and not fatal
        else 0.0,
    }
    if run.integrity != "ok":
        details["output_tail"] = run.output_tail
    return GradeResult(1.0 if passed else 0.0, passed, flags, outcomes, "graded", details)
