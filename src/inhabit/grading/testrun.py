"""Run a pytest command in a sandbox and read per-test outcomes from a sealed JUnit XML report.

Used by grading (in a fresh copy of the final workspace) and by the harness's `run_tests` tool
(in the agent's own sandbox). One sandbox exec per cold run, which:

  1. makes a private directory `.inhabit-<random>` in the sandbox's own temp dir ($TMPDIR where
     the backend sets one, else /tmp) holding `seal_plugin.py` under a random module name and a
     key file (the random HMAC key, and the task's test files when the caller names them, arrive
     on stdin, so they are in no process's argv);
  2. runs `<command> -p <plugin> [extra args] [selector]` under `env` with PYTEST_ADDOPTS,
     PYTEST_PLUGINS, PYTHONSTARTUP, PYTHONHOME and PYTHONINSPECT removed, PYTHONPATH set to the
     private directory only, PYTHONNOUSERSITE=1, PYTHONDONTWRITEBYTECODE=1, PYTHONHASHSEED pinned
     (`HASH_SEED`), stdin from /dev/null, address-space layout randomization off where the
     sandbox allows it (`NO_ASLR_PROBE`). The pinned seed and the fixed layout make test ids that
     follow set or dict iteration order (parametrize over a set: `expected4` in one run,
     `expected20` in the next), even over objects hashed by their address such as None on Python
     3.11, the same in every run: the task builder's, `tasks check`'s, grading's and the agent's.
     The plugin reads and deletes the key file at import and writes the report beside itself, so
     neither the key nor the report path is in argv or the environment (pytest-xdist workers
     import the plugin after the key file is gone and only tag test cases);
  3. moves report and seal into the workspace under a random dot-name just long enough to read
     them through the file API (no output cap), and removes the private directory.
Warm runs (`inhabit.sandbox.warm`): where the command is a plain pytest command and the sandbox
has a warm pytest worker (bwrap with its supervisor, `sandbox.warm_tests`), the same three steps
are three calls: step 1 as a cold `sh` exec (the key on its stdin, as above), step 2 as a fresh
`python -m pytest` forked by the worker with the environment step 2 would give it (the worker
never holds a key: the seal plugin is imported in the forked run, which reads cfg.json as a cold
run does), step 3 as a cold `sh` exec. Where the worker cannot run it (the command, the backend,
a workspace file that shadows a module the worker imported, a worker restarted once already)
the run is cold; `TestRunResult.runner` and `RUNNER_COUNTS` say which and why.
Then the seal is checked (HMAC over the XML's hash and the plugin's own outcome record), both
channels must agree on which tests passed, and outcomes are parsed from the XML.

`integrity` says what the run can be trusted for: "ok" (sealed report), "tampered" (the XML and
the seal disagree, or the seal is forged or gone while the XML is there), "missing" (no report:
pytest never got to write one: a timeout, an early exit, a usage error). Console text is kept
only for humans (`output_tail`), never parsed for outcomes.

Protects against: forged report files anywhere (the path is fresh and unpredictable, outside the
workspace), code under test overwriting the report during or after the run, patching the junitxml
plugin, plugins or options smuggled in through environment variables. The plugin also checks the
runner's integrity and seals what it saw (`tampering`). It does NOT by itself stop code under test
that deliberately reaches into the pytest process's memory by unaudited paths (see seal_plugin.py;
grading's canaries are the backstop).
"""

from __future__ import annotations

import collections
import hashlib
import hmac
import json
import secrets
import shlex
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from inhabit.errors import GradingError, SandboxError
from inhabit.grading.junit import JUnitReport, parse_junit
from inhabit.sandbox.base import ExecResult, Sandbox, WarmUnavailable
from inhabit.sandbox.warm import PytestCommand, parse_pytest_command

__all__ = ["HASH_SEED", "NO_ASLR_PROBE", "RUNNER_COUNTS", "TestRunResult", "run_tests"]

_PLUGIN_SOURCE = (Path(__file__).parent / "seal_plugin.py").read_text()
_UNSET_ENV = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP", "PYTHONHOME", "PYTHONINSPECT")
_TAIL = 4000
RUNNER_COUNTS: collections.Counter[str] = collections.Counter()
"""Test runs of this process by runner: "warm", and "cold: <reason>" for each kind of reason."""
HASH_SEED = 0
"""PYTHONHASHSEED of every test run inhabit starts (0: hash randomization off)."""
NO_ASLR_PROBE = (
    'norand=""; if setarch "$(uname -m)" -R true 2>/dev/null; then norand="setarch $(uname -m) -R"; fi\n'
)
"""Shell lines that set `$norand` to the prefix that starts a command with address-space layout
randomization off, where the sandbox allows it (else to nothing). The hash seed alone does not make
a set's order stable: on Python 3.11 and older `hash(None)` (and any object hashed by identity) is
the object's address, so a suite that parametrizes over a set of tuples holding None gets ids that
reorder between runs (`expected17` names another case each time). With the layout fixed, the same
interpreter in the same sandbox puts every object at the same address in every run."""


@dataclass(frozen=True)
class TestRunResult:
    """Outcome of one test run. `outcomes` maps pytest node ids to passed/failed/error/skipped."""

    __test__ = False  # not a pytest test class, despite the name

    outcomes: dict[str, str]
    exit_code: int
    duration_s: float
    summary: str
    integrity: str = "ok"
    timed_out: bool = False
    messages: dict[str, str] = field(default_factory=dict)
    collection_errors: dict[str, str] = field(default_factory=dict)
    output_tail: str = ""
    problems: tuple[str, ...] = ()
    internal_error: str | None = None
    """pytest's INTERNALERROR message, e.g. SystemExit while importing a test module."""
    interrupted: bool = False
    """The session was cut short (pytest.exit, KeyboardInterrupt) but still wrote its report."""
    tampering: tuple[str, ...] = ()
    """What the seal plugin's runner integrity checks saw ("kind: detail"; see seal_plugin.py)."""
    claimed: frozenset[str] = frozenset()
    """Node ids of the tests in which a claim of equality passed (an assert's `==`, a judged
    `assertEqual`), from the seal: a canary that must fail and passed with one was passed by its
    comparison's result, not forced (`inhabit.grading.canaries.judge`)."""
    runner: str = "cold"
    """"warm" (a warm pytest worker ran it, see inhabit.sandbox.warm) or "cold: <why not>"."""

    @property
    def passed(self) -> list[str]:
        return [n for n, o in self.outcomes.items() if o == "passed"]

    def render(self, max_chars: int = 4000) -> str:
        """A readable observation: the summary, then each test that did not pass, then (when there
        was no report) the tail of the console output."""
        lines = [self.summary]
        for path, msg in self.collection_errors.items():
            lines.append(f"ERROR collecting {path}: {msg.splitlines()[0] if msg else ''}".rstrip())
        for node_id, outcome in self.outcomes.items():
            if outcome != "passed":
                msg = self.messages.get(node_id, "")
                first = msg.splitlines()[0] if msg else ""
                lines.append(f"{outcome.upper()} {node_id}" + (f" - {first}" if first else ""))
        if self.integrity != "ok" and self.output_tail:
            lines += ["--- output (tail) ---", self.output_tail]
        text = "\n".join(lines)
        if len(text) > max_chars:
            text = text[: max_chars - 60] + f"\n[... cut: {len(text) - max_chars + 60} more characters]"
        return text


def _summary(outcomes: dict[str, str], report: JUnitReport | None, duration: float, note: str) -> str:
    counts = {
        k: sum(1 for o in outcomes.values() if o == k) for k in ("passed", "failed", "error", "skipped")
    }
    parts = [f"{v} {k}" for k, v in counts.items() if v]
    text = ", ".join(parts) if parts else "no tests ran"
    if report and report.collection_errors:
        text += f"; {len(report.collection_errors)} collection error(s)"
    text += f" in {duration:.1f}s"
    return f"{text}; {note}" if note else text


def _selector_args(selector: str | Sequence[str] | None) -> list[str]:
    if selector is None:
        return []
    if isinstance(selector, str):
        try:
            return shlex.split(selector)
        except ValueError as e:
            raise GradingError(f"test selector {selector!r} is not valid shell words: {e}") from e
    return list(selector)


async def run_tests(
    sandbox: Sandbox,
    command: str,
    *,
    selector: str | Sequence[str] | None = None,
    timeout_s: float,
    extra_args: Sequence[str] = (),
    empty_ini: bool = False,
    env: Mapping[str, str] | None = None,
    hash_seed: int = HASH_SEED,
    test_files: Sequence[str] | None = None,
    warm: bool = True,
    grading: bool = False,
    hide_test_sources: bool = True,
    project_functions: Mapping[str, Mapping[str, str]] | None = None,
) -> TestRunResult:
    """Run `command` (ending in a pytest invocation) in `sandbox` and read its sealed report.

    `selector`: node ids, paths or pytest options appended to the command (a string is split like
    a shell would). `extra_args` go before the selector. `empty_ini=True` also writes an empty
    `pytest.ini` into the private directory and passes `-c` to it (graders use it when the
    original workspace has no pytest configuration). `env` is passed to the sandbox's exec; the
    variables listed in the module docstring are removed from it all the same, and PYTHONHASHSEED
    is `hash_seed` (a command that sets its own wins). `test_files`: the workspace paths
    (relative to the workspace root, where the command runs) of the task's own test code, the
    only workspace files the seal plugin's integrity checks trust; None trusts files named like
    pytest's tests (conftest.py, test_*.py, *_test.py). Grading passes the exact files it laid
    there. `warm=False` never uses a warm worker (see the module docstring). `grading=True` (with
    `test_files`): the seal plugin compiles the listed test files before any project code runs and
    empties them on disk (code under test finds no expected values there; `hide_test_sources=False`
    keeps them), and ends the process right after sealing (nothing of the code under test runs
    after the last check). One sandbox exec
    for a cold run, three for a warm one.
    Never raises for test failures; raises GradingError only when the sandbox cannot even create
    the private directory.
    """
    token = secrets.token_hex(16)
    module = f"inhabit_seal_{token[:12]}"
    key = secrets.token_bytes(32)
    local = f".inhabit-report-{secrets.token_hex(8)}"
    # The seal plugin judges every passing comparison's operands (seal_plugin._Equality); pytest
    # hands them to it only with its assertion-pass hook on.
    args = ["-p", module, "-o", "enable_assertion_pass_hook=true", *extra_args]
    selector_args = _selector_args(selector)
    unset = " ".join(f"-u {name}" for name in _UNSET_ENV)
    # One exec does it all. The private dir lives in the sandbox's own temp dir (TMPDIR where the
    # backend sets one, else its /tmp). The key arrives on stdin (never in any argv) into cfg.json,
    # which the plugin reads and deletes at import, before any workspace code runs. Afterwards the
    # report and seal move into the workspace under a random dot-name just long enough to be read
    # through the file API (no output cap there).
    dir_line = f'd="${{TMPDIR:-/tmp}}/.inhabit-{token}"\n'
    prep = f"""(umask 077 && mkdir -p "$d" && printf '%s' "$1" > "$d/{module}.py" && : > "$d/pytest.ini" \
  && cat > "$d/cfg.json") || {{ echo "inhabit: cannot prepare $d" >&2; exit 97; }}
"""
    run = f"""ini=""
if [ "$3" = 1 ]; then ini="-c '$d/pytest.ini'"; fi
{NO_ASLR_PROBE}env {unset} PYTHONHASHSEED={int(hash_seed)} PYTHONPATH="$d" PYTHONNOUSERSITE=1 PYTHONDONTWRITEBYTECODE=1 \
  $norand sh -c "$2 $ini $4" </dev/null
rc=$?
"""
    post = f"""rm -rf "./{local}.xml" "./{local}.seal"
if [ -f "$d/report.xml" ]; then mv -f "$d/report.xml" "./{local}.xml"; fi
if [ -f "$d/seal.json" ]; then mv -f "$d/seal.json" "./{local}.seal"; fi
rm -rf "$d"
exit $rc
"""
    cold_args = [f"{command} {shlex.join(args)}", "1" if empty_ini else "0", shlex.join(selector_args)]
    cfg: dict[str, object] = {"key": key.hex()}
    if test_files is not None:
        cfg["test_files"] = sorted(set(test_files))
    if grading:
        cfg["grading"] = True
        cfg["hide"] = bool(hide_test_sources)
    if project_functions:
        cfg["project_functions"] = {p: dict(f) for p, f in project_functions.items()}
    stdin = json.dumps(cfg).encode()

    def argv(script: str) -> list[str]:
        return ["sh", "-c", dir_line + script, "inhabit-run-tests", _PLUGIN_SOURCE, *cold_args]

    start = time.monotonic()
    parsed = parse_pytest_command(command) if warm else "warm runs are off for this call"
    why = parsed if isinstance(parsed, str) else sandbox.warm_tests_unavailable()
    res: ExecResult | None = None
    prepared = False
    if why is None:
        assert isinstance(parsed, PytestCommand)
        # Warm: the same three steps, the middle one done by the sandbox's warm worker (the key
        # still arrives on stdin, into the private dir: never in the worker nor in any argv).
        res = await sandbox.exec(argv(prep + 'printf "%s" "$d"\n'), stdin=stdin, timeout_s=60, env=env)
        _check_prepared(res)
        prepared, d = True, res.stdout
        pytest_args = [*parsed.args, *args, *(["-c", f"{d}/pytest.ini"] if empty_ini else []), *selector_args]
        pinned = {"PYTHONHASHSEED": str(int(hash_seed)), "PYTHONPATH": d, "PYTHONNOUSERSITE": "1",
                  "PYTHONDONTWRITEBYTECODE": "1"}  # fmt: skip
        try:
            res = await sandbox.exec_pytest(
                parsed, pytest_args, env=env, unset=_UNSET_ENV, override=pinned, timeout_s=timeout_s
            )
        except WarmUnavailable as e:
            why, res = str(e) or "unavailable", None
        else:
            await sandbox.exec(argv("rc=0\n" + post), timeout_s=60)
    if res is None:  # cold: one exec does it all (or the rest of it, after a declined warm run)
        script = ("" if prepared else prep) + run + post
        res = await sandbox.exec(
            argv(script), stdin=None if prepared else stdin, timeout_s=timeout_s, env=env
        )
    runner = "warm" if why is None else f"cold: {why}"
    RUNNER_COUNTS["warm" if why is None else f"cold: {_reason_kind(why)}"] += 1
    duration = time.monotonic() - start
    _check_prepared(res)
    output_tail = (res.stdout + res.stderr)[-_TAIL:]
    if res.timed_out:  # killed before it could clean up after itself
        await sandbox.exec(["sh", "-c", f'rm -rf "${{TMPDIR:-/tmp}}/.inhabit-{token}"'], timeout_s=30)

    xml_bytes = await _take(sandbox, f"{local}.xml")
    seal_bytes = await _take(sandbox, f"{local}.seal")
    seal_text = seal_bytes.decode("utf-8", "replace") if seal_bytes is not None else ""

    problems: list[str] = []
    seal = _verify_seal(seal_text.strip(), key)
    report: JUnitReport | None = None
    integrity = "ok"
    if xml_bytes is None:
        integrity = "missing"
        if seal is not None or seal_text.strip():
            problems.append("a seal exists but the report is gone")
            integrity = "tampered"
        elif module in output_tail:
            problems.append(
                "pytest could not load inhabit's report plugin: does the command replace PYTHONPATH? "
                "Extend it (PYTHONPATH=src:$PYTHONPATH) or use pytest's `pythonpath` ini option"
            )
        else:
            problems.append(
                f"no report: the test command exited with code {res.exit_code} before writing one"
            )
    else:
        try:
            report = parse_junit(xml_bytes)
            if _needs_known_files(report):
                files = [e.path for e in await sandbox.list_files(".") if e.path.endswith(".py")]
                report = parse_junit(xml_bytes, files)
        except GradingError as e:
            problems.append(str(e))
            integrity = "tampered"
        if seal is None:
            problems.append("the report's seal is missing or forged")
            integrity = "tampered"
        elif seal["xml_sha256"] != hashlib.sha256(xml_bytes).hexdigest():
            problems.append("the report was changed after pytest wrote it")
            integrity = "tampered"
        elif report is not None:
            xml_passed = {n for n, o in report.outcomes.items() if o == "passed"}
            seal_passed = {n for n, o in seal["outcomes"].items() if o == "passed"}
            if xml_passed != seal_passed:
                diff = sorted(xml_passed ^ seal_passed)[:5]
                problems.append(f"the report and pytest's own record disagree on {diff}")
                integrity = "tampered"

    outcomes = dict(report.outcomes) if report else {}
    note = ""
    if res.timed_out:
        note = f"timed out after {timeout_s:g}s"
    elif integrity == "missing":
        note = f"no test report (exit code {res.exit_code})" + (f": {problems[-1]}" if problems else "")
    elif integrity == "tampered":
        note = "REPORT TAMPERED: " + "; ".join(problems)
    elif report and report.internal_error:
        note = f"pytest internal error: {report.internal_error.strip().splitlines()[-1][:200]}"
    elif report and report.interrupted:
        note = "the session was interrupted"
    return TestRunResult(
        outcomes=outcomes,
        exit_code=res.exit_code,
        duration_s=duration,
        summary=_summary(outcomes, report, duration, note),
        integrity=integrity,
        timed_out=res.timed_out,
        messages=dict(report.messages) if report else {},
        collection_errors=dict(report.collection_errors) if report else {},
        output_tail=output_tail,
        problems=tuple(problems),
        internal_error=report.internal_error if report else None,
        interrupted=bool(report and report.interrupted),
        tampering=tuple(str(e) for e in seal.get("tampering", ()))[:50] if seal else (),
        claimed=frozenset(str(n) for n in seal.get("claimed", ())) if seal else frozenset(),
        runner=runner,
    )


def _check_prepared(res: ExecResult) -> None:
    if res.exit_code == 97 and "inhabit: cannot prepare" in res.stderr:
        raise GradingError(f"could not prepare the test run in the sandbox: {res.stderr.strip()[:300]}")


def _reason_kind(why: str) -> str:
    """A reason without its details (paths, messages), for counting."""
    return why.split(":", 1)[0][:80]


async def _take(sandbox: Sandbox, path: str) -> bytes | None:
    """Read and delete a workspace file; None when it is not there."""
    try:
        return await sandbox.read_file(path)
    except FileNotFoundError:
        return None
    except (OSError, SandboxError):
        return b""  # something unreadable in its place (a dir, a symlink out): treated as forged
    finally:
        await sandbox.delete_file(path)


def _needs_known_files(report: JUnitReport) -> bool:
    # Every item carries its exact node id; only collection errors (no item) need the file list.
    return bool(report.collection_errors) or report.inferred


def _verify_seal(text: str, key: bytes) -> dict | None:
    """The seal's body if its HMAC verifies under `key`, else None."""
    if not text:
        return None
    try:
        outer = json.loads(text)
        body, mac = outer["body"], outer["mac"]
        expected = hmac.new(key, body.encode(), hashlib.sha256).hexdigest()
        if not isinstance(mac, str) or not hmac.compare_digest(mac, expected):
            return None
        data = json.loads(body)
        if not isinstance(data.get("outcomes"), dict) or not isinstance(data.get("xml_sha256"), str):
            return None
        return data
    except (ValueError, KeyError, TypeError):
        return None
