"""`inhabit tasks check`: is a task directory valid and gradable?

A task is valid when
  * task.toml and the directory follow format 1 (`load_task`), with a [grading] table;
  * on the untouched workspace (graded exactly as an agent's final workspace would be), every
    fail_to_pass test fails or errors, every pass_to_pass test passes, and grading raises no flag;
  * when reference.patch is present, it applies (`patch -p1`, else `git apply`) inside a sandbox,
    and grading that workspace passes every required test with no flag (reward 1).
Without reference.patch nothing shows the fail_to_pass tests can pass; the report says so.

When the untouched workspace cannot run its tests at all (a module that is not installed, a syntax
error: `inhabit.grading.diagnose`), the report says that once, with the first error line and the fix,
and stops: every per-test line and every flag after that would repeat the same cause.
Problems are `Problem` objects (kind, message, node id, structured detail), so `--json` carries
data, never a Python repr inside a string.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from inhabit.envs.task_env import task_environment
from inhabit.errors import EnvError, TaskFormatError
from inhabit.grading.diagnose import cannot_run
from inhabit.grading.grader import GradeResult, GradingConfig, grade
from inhabit.grading.hacks import TIMEOUT
from inhabit.sandbox.base import Sandbox, SandboxProvider, create_sandbox
from inhabit.tasks.task import Task, load_task

__all__ = ["CheckReport", "Problem", "apply_patch", "check_task"]

_PER_TEST_FLAGS = {"collection_error", "tests_missing", "tests_skipped"}


@dataclass
class TestCheck:
    """One required test: its outcome before and after the reference fix, and whether both are right."""

    __test__ = False

    node_id: str
    kind: str
    before: str
    after: str | None
    ok: bool


@dataclass(frozen=True)
class Problem:
    """One reason a task is invalid. `kind`: format, grading, cannot_run, flag, patch, test."""

    kind: str
    message: str
    node_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.message


@dataclass
class CheckReport:
    """Everything `inhabit tasks check` found; `valid` is False when any problem was found."""

    path: str
    task_id: str | None = None
    valid: bool = False
    problems: list[Problem] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    tests: list[TestCheck] = field(default_factory=list)
    before: dict[str, Any] | None = None
    after: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def problem_lines(self) -> list[str]:
        """Each problem's message."""
        return [p.message for p in self.problems]

    def add(self, kind: str, message: str, node_id: str | None = None, /, **detail: Any) -> None:
        self.problems.append(Problem(kind, message, node_id, detail))


async def apply_patch(sandbox: Sandbox, patch: bytes) -> str | None:
    """Apply a -p1 unified diff in the sandbox's workspace; None on success, else the error text."""
    res = await sandbox.exec(
        ["patch", "-p1", "--batch", "--forward", "--no-backup-if-mismatch"], stdin=patch, timeout_s=60
    )
    if res.ok:
        return None
    first = (res.stdout + res.stderr).strip()
    if res.exit_code == 127:  # no `patch` in the sandbox: try git
        res = await sandbox.exec(["git", "apply", "-p1", "-"], stdin=patch, timeout_s=60)
        if res.ok:
            return None
        first = (res.stdout + res.stderr).strip()
    return first[-1000:] or f"exit code {res.exit_code}"


def _flag_cause(result: GradeResult, flag: str) -> str:
    """What raised `flag`, in the grading's own words: for runner_tampered the integrity checks'
    findings (which object changed, where it is defined, which line changed it, during which
    test) and the canaries that betrayed it; else grading's notes and problems."""
    d = result.details
    if flag == "runner_tampered":
        events = list(d.get("runner_events") or [])
        betrayed = list((d.get("canaries") or {}).get("betrayed") or [])
        parts = events[:3] + (
            [f"canaries with the wrong outcome: {', '.join(map(str, betrayed[:3]))}"] if betrayed else []
        )
        return "; ".join(parts) or "no detail recorded"
    parts = [*map(str, d.get("notes") or []), *map(str, d.get("problems") or [])]
    return "; ".join(parts[:3]) or "see the grading details"


def _timed_out(what: str, limit_s: float) -> str:
    """A grading run cut at the task's time limit: no report, so nothing about the tests is known
    (it is not that the suite cannot start)."""
    return (
        f"grading {what} ran past the task's time limit ({limit_s:.0f} s, [grading] timeout_s) and "
        "was stopped before pytest wrote its report: a loop that never ends, or a suite that needs "
        "longer on this machine (raise timeout_s)"
    )


def _summarize(result: GradeResult) -> dict[str, Any]:
    return {
        "reward": result.reward,
        "status": result.status,
        "flags": result.flags,
        "outcomes": result.outcomes,
        "summary": result.details.get("summary") or result.details.get("error", ""),
    }


async def _grade_workspace(
    task: Task, provider: SandboxProvider, config: GradingConfig, patch: bytes | None, env: Path | None
):
    sandbox = await create_sandbox(provider, task.workspace_dir, limits=task.limits(provider), env=env)
    try:
        if patch is not None:
            error = await apply_patch(sandbox, patch)
            if error is not None:
                return None, error
        return await grade(task, sandbox, provider, config=config), None
    finally:
        await sandbox.close()


async def check_task(
    path: str | Path, provider: SandboxProvider, *, config: GradingConfig | None = None
) -> CheckReport:
    """Validate the task directory at `path` using sandboxes from `provider`."""
    report = CheckReport(path=str(path))
    try:
        task = load_task(path)
    except TaskFormatError as e:
        report.add("format", str(e))
        return report
    report.task_id = task.id
    if task.grading is None:
        report.add("format", "task.toml has no [grading] table: add command, fail_to_pass and pass_to_pass")
        return report
    spec = task.grading
    config = config or GradingConfig()
    if not spec.fail_to_pass:
        report.notes.append("no fail_to_pass tests: the task does not show that anything needs fixing")

    try:
        built = await task_environment(task)
    except EnvError as e:
        report.add("environment", f"the task's [environment] cannot be built: {e}", error=str(e))
        return report
    env = built.path if built is not None else None
    if built is not None:
        report.notes.append(f"environment {built.env_id[:19]} ({'reused' if built.reused else 'built'})")
    before, _ = await _grade_workspace(task, provider, config, None, env)
    assert before is not None
    report.before = _summarize(before)
    if before.status != "graded":
        error = before.details.get("error")
        report.add("grading", f"grading the original workspace failed: {error}", error=error)
        return report
    if TIMEOUT in before.flags:
        report.add("grading", _timed_out("the untouched workspace", spec.timeout_s), flag=TIMEOUT)
        return report
    cause = cannot_run(
        before.outcomes,
        spec.required_tests,
        before.details.get("collection_errors") or {},
        integrity=before.details.get("integrity", "ok"),
        output_tail=before.details.get("output_tail", ""),
        workspace=task.workspace_dir,
        has_environment=task.environment is not None,
    )
    if cause is not None:
        report.add("cannot_run", cause.message(), **cause.to_dict())
        for kind, ids in (("fail_to_pass", spec.fail_to_pass), ("pass_to_pass", spec.pass_to_pass)):
            report.tests += [TestCheck(n, kind, before.outcomes.get(n, "missing"), None, False) for n in ids]
        return report
    for flag in before.flags:
        if flag not in _PER_TEST_FLAGS:
            report.add(
                "flag",
                f"grading the untouched workspace raises flag {flag!r}: {_flag_cause(before, flag)}",
                flag=flag,
                notes=list(before.details.get("notes") or []),
                problems=list(before.details.get("problems") or []),
                runner_events=list(before.details.get("runner_events") or []),
            )

    after: GradeResult | None = None
    if task.reference_patch is not None:
        after, error = await _grade_workspace(task, provider, config, task.reference_patch.read_bytes(), env)
        if error is not None:
            report.add("patch", f"reference.patch does not apply to workspace/: {error}", error=error)
        elif after is not None:
            report.after = _summarize(after)
            if after.status != "graded":
                error = after.details.get("error")
                report.add("grading", f"grading the reference fix failed: {error}", error=error)
            if TIMEOUT in after.flags:
                report.add("grading", _timed_out("the reference fix", spec.timeout_s), flag=TIMEOUT)
            for flag in after.flags:
                if flag not in _PER_TEST_FLAGS and flag != TIMEOUT:
                    report.add(
                        "flag",
                        f"the reference fix raises flag {flag!r}: {_flag_cause(after, flag)} (does "
                        "reference.patch touch tests or test configuration? put test changes in hidden/)",
                        flag=flag,
                        runner_events=list(after.details.get("runner_events") or []),
                    )
    else:
        report.notes.append("no reference.patch: nothing shows that the fail_to_pass tests can pass")

    for kind, ids in (("fail_to_pass", spec.fail_to_pass), ("pass_to_pass", spec.pass_to_pass)):
        for node_id in ids:
            b = before.outcomes.get(node_id, "missing")
            a = (
                after.outcomes.get(node_id, "missing")
                if after is not None and after.status == "graded"
                else None
            )
            problems = []
            if b == "missing":
                problems.append("was not found in the test report (check the node id)")
            elif kind == "fail_to_pass" and b not in ("failed", "error"):
                problems.append(f"should fail before the fix but is {b}")
            elif kind == "pass_to_pass" and b != "passed":
                problems.append(f"should pass before the fix but is {b}")
            if a is not None and a != "passed":
                problems.append(f"should pass with reference.patch but is {a}")
            for p in problems:
                report.add("test", f"{kind} {node_id} {p}", node_id, kind=kind, before=b, after=a)
            report.tests.append(TestCheck(node_id, kind, b, a, not problems))
    report.valid = not report.problems
    return report
