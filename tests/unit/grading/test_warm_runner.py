"""Warm pytest workers (inhabit.sandbox.warm) in real bwrap sandboxes: a warm run is a fresh
`python -m pytest` to the code under test (same argv, sys.path, environment, outcomes as a cold
run), nothing a run does reaches the worker or a later run, and a hostile sandbox can at most make
runs cold. Commands that cannot be warm are told apart without a sandbox."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from inhabit.grading.testrun import run_tests
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.sandbox.bwrap import bwrap_problem
from inhabit.sandbox.warm import PytestCommand, parse_pytest_command

needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None, reason="bwrap does not work on this host")
COMMAND = "python -m pytest -q -p no:cacheprovider"

# What a fresh interpreter looks like from a test: compared between a warm and a cold run.
PROBE = """import ctypes, json, os, random, sys, warnings, __main__

def test_probe():
    with open(os.environ.get("PROBE_OUT", "probe.json"), "w") as f:
        json.dump({
            "argv": sys.argv, "path": sys.path, "env": sorted(os.environ.items()),
            "flags": list(sys.flags), "main": getattr(__main__, "__file__", None),
            "hash": hash("inhabit"), "cwd": os.getcwd(), "fds": sorted(os.listdir("/proc/self/fd")),
            "random": random.random(), "filters": [str(f) for f in warnings.filters],
            "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
            "sid": os.getsid(0) == os.getpid(), "stdin": os.readlink("/proc/self/fd/0"),
        }, f)
"""


@pytest.fixture
async def bwrap_provider():
    provider = create_provider(SandboxConfig(backend="bwrap"))
    yield provider
    await provider.close()


def _same_run(text: str) -> str:
    """Erase what differs between any two runs: the private dir and plugin names, pids."""
    return re.sub(r"inhabit(-|_seal_)[0-9a-f]+", "inhabit-X", text)


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("python -m pytest -q", PytestCommand("python", False, ("-q",), ())),
        (
            "env A=1 B='x y' python3 -m pytest",
            PytestCommand("python3", False, (), (("A", "1"), ("B", "x y"))),
        ),
        ("PYTHONPATH=src pytest -x", PytestCommand("pytest", True, ("-x",), (("PYTHONPATH", "src"),))),
        ("python -m pytest tests; rm -rf /", "shell syntax in the command"),
        ("python -m pytest $ARGS", "shell syntax in the command"),
        (
            "PYTHONHASHSEED=1 python -m pytest",
            "the command sets PYTHONHASHSEED, which the interpreter reads at start",
        ),
        ("LANG=C python -m pytest", "the command sets LANG, which the interpreter reads at start"),
        ("python -I -m pytest", "not `python -m pytest` (interpreter options, or another module)"),
        ("env -i python -m pytest", "env options in the command"),
        ("make test", "not a pytest command"),
    ],
)
def test_which_commands_can_run_warm(command, expected):
    assert parse_pytest_command(command) == expected


@needs_bwrap
async def test_a_warm_run_looks_like_a_fresh_interpreter(make_task, bwrap_provider):
    task = make_task(workspace={"tests/test_probe.py": PROBE}, command=COMMAND)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        seen = {}
        for warm in (False, True, True):
            result = await run_tests(sb, COMMAND, timeout_s=60, warm=warm)
            assert result.outcomes == {"tests/test_probe.py::test_probe": "passed"}
            assert result.runner == ("warm" if warm else "cold: warm runs are off for this call")
            seen.setdefault(warm, []).append(json.loads(await sb.read_file("probe.json")))
        cold, warm1, warm2 = seen[False][0], *seen[True]
        assert warm1["random"] != warm2["random"]  # each run is seeded afresh
        for probe in (cold, warm1, warm2):
            probe.pop("random")
        assert _same_run(json.dumps(warm1)) == _same_run(json.dumps(cold))
        assert _same_run(json.dumps(warm2)) == _same_run(json.dumps(cold))
    assert bwrap_provider.exec_counts["warm_starts"] == 1


POISON = """import os, sys, _pytest, pytest

def test_poison():
    pytest.POISONED = True
    _pytest.python.Function.runtest = lambda self: None  # every later test would pass
    os.environ["POISONED"] = "1"
    sys.modules["json"] = None
    pid = os.fork()
    if pid == 0:  # a daemon that outlives the run if it can: writes every 50 ms
        os.setsid()
        if os.fork() == 0:
            import time
            while True:
                with open("heartbeat", "a") as f:
                    f.write("x")
                time.sleep(0.05)
        os._exit(0)

def test_clean():
    assert not hasattr(pytest, "POISONED") and "POISONED" not in os.environ
    assert sys.modules.get("json") is not None

def test_fails():
    assert False
"""


async def _heartbeat(sb) -> str | None:
    try:
        return await sb.read_file("heartbeat")
    except FileNotFoundError:
        return None


@needs_bwrap
async def test_nothing_a_run_does_reaches_a_later_run(make_task, bwrap_provider):
    task = make_task(workspace={"tests/test_poison.py": POISON}, command=COMMAND)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        first = await run_tests(sb, COMMAND, selector="tests/test_poison.py::test_poison", timeout_s=60)
        assert first.runner == "warm" and first.outcomes == {"tests/test_poison.py::test_poison": "passed"}
        # On a loaded machine the run may end before the daemon's first write: no file yet is fine,
        # as long as none appears or grows afterwards.
        beat = await _heartbeat(sb)
        await asyncio.sleep(0.5)
        assert await _heartbeat(sb) == beat  # the daemon died with its run
        later = await run_tests(sb, COMMAND, selector=["-k", "clean or fails"], timeout_s=60)
        assert later.runner == "warm"
        assert later.outcomes == {
            "tests/test_poison.py::test_clean": "passed",
            "tests/test_poison.py::test_fails": "failed",
        }
        assert later.tampering == ()


REACH = """import ctypes, os, signal

def test_reach():
    me = os.getpid()
    reached = []
    for pid in [int(p) for p in os.listdir("/proc") if p.isdigit()]:
        if pid == me:
            continue
        for what in ("mem", "environ"):
            try:
                with open(f"/proc/{pid}/{what}", "rb") as f:
                    f.read(1)
                reached.append((pid, what))
            except OSError:
                pass
        try:
            os.listdir(f"/proc/{pid}/fd")
            reached.append((pid, "fd"))
        except OSError:
            pass
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(16, pid, 0, 0) == 0:  # PTRACE_ATTACH
            reached.append((pid, "ptrace"))
            # Detach only at the attach's own SIGSTOP, and with no signal: a detach before the
            # stop fails and leaves the tracee stopped (the run would hang to its timeout); any
            # other signal that stops it first is passed on (PTRACE_CONT) until the SIGSTOP comes.
            _, status = os.waitpid(pid, 0)
            while os.WIFSTOPPED(status) and os.WSTOPSIG(status) != signal.SIGSTOP:
                libc.ptrace(7, pid, 0, os.WSTOPSIG(status))  # PTRACE_CONT
                _, status = os.waitpid(pid, 0)
            if os.WIFSTOPPED(status):
                libc.ptrace(17, pid, 0, 0)  # PTRACE_DETACH
    # Only the run's own shell (a cold run's parent `sh` is as reachable); never the worker, its
    # exec-init or PID 1, which hold the worker's channel and state.
    assert {pid for pid, _ in reached} <= {os.getppid()}
    assert not [p for p, _ in reached if open(f"/proc/{p}/comm").read().strip() != "sh"]
"""


@needs_bwrap
async def test_code_under_test_cannot_reach_the_worker_or_its_init(make_task, bwrap_provider):
    task = make_task(workspace={"tests/test_reach.py": REACH}, command=COMMAND)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        result = await run_tests(sb, COMMAND, timeout_s=60)
        assert result.runner == "warm" and not result.timed_out
        assert result.outcomes == {"tests/test_reach.py::test_reach": "passed"}, result.render()


STEAL = """import glob, os

def test_steal():
    # The private dirs of other runs: a later run's key must never be where this run can look.
    found = glob.glob(os.environ.get("TMPDIR", "/tmp") + "/.inhabit-*/cfg.json")
    assert found == []
"""


@needs_bwrap
async def test_a_run_sees_no_key_file(make_task, bwrap_provider):
    task = make_task(workspace={"tests/test_steal.py": STEAL}, command=COMMAND)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        for _ in range(2):
            result = await run_tests(sb, COMMAND, timeout_s=60)
            assert result.runner == "warm" and result.passed == ["tests/test_steal.py::test_steal"]


CALC_TEST = "from calc import add\n\ndef test_add():\n    assert add(1, 2) == 3\n"


@needs_bwrap
@pytest.mark.parametrize("shadow", ["pluggy.py", "iniconfig/__init__.py", "_pytest/__init__.py"])
async def test_a_workspace_module_that_shadows_the_worker_s_runs_cold(make_task, bwrap_provider, shadow):
    files = {
        "calc.py": "def add(a, b):\n    return a + b\n",
        "tests/test_calc.py": CALC_TEST,
        shadow: "BROKEN = 1\n",
    }
    task = make_task(workspace=files, command=COMMAND)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        cold = await run_tests(sb, COMMAND, timeout_s=60, warm=False)
        result = await run_tests(sb, COMMAND, timeout_s=60)
        assert result.runner.startswith("cold: declined") and "shadows" in result.runner
        assert (result.outcomes, result.integrity, result.exit_code) == (
            cold.outcomes,
            cold.integrity,
            cold.exit_code,
        )


# kill(-1) spares its caller: pytest would go on and write its report while the sandbox reaps
# it, so the test ends itself too, and no report (half-written or whole) is ever left.
KILLER = """import os, signal

def test_kill_everything():
    os.kill(-1, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
"""


@needs_bwrap
async def test_a_killed_worker_is_restarted_once_then_runs_are_cold(make_task, bwrap_provider):
    files = {
        "calc.py": "def add(a, b):\n    return a + b\n",
        "tests/test_calc.py": CALC_TEST,
        "tests/test_kill.py": KILLER,
    }
    task = make_task(workspace=files, command=COMMAND)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        killed_cold = await run_tests(sb, COMMAND, selector="tests/test_kill.py", timeout_s=60, warm=False)
        killed = await run_tests(sb, COMMAND, selector="tests/test_kill.py", timeout_s=60)
        assert killed.runner == "warm"
        assert (
            (killed.integrity, killed.exit_code)
            == (killed_cold.integrity, killed_cold.exit_code)
            == ("missing", -9)
        )
        again = await run_tests(sb, COMMAND, selector="tests/test_calc.py", timeout_s=60)
        assert again.runner == "warm" and again.passed == ["tests/test_calc.py::test_add"]
        await sb.exec("kill -9 -1")  # the agent kills it between runs
        last = await run_tests(sb, COMMAND, selector="tests/test_calc.py", timeout_s=60)
        assert last.runner == "cold: the worker was restarted once already"
        assert last.passed == ["tests/test_calc.py::test_add"]
    assert bwrap_provider.exec_counts["warm_starts"] == 2


SLOW = "import time\n\ndef test_slow():\n    time.sleep(60)\n"


@needs_bwrap
async def test_a_warm_run_times_out_like_a_cold_one_and_the_worker_stays(make_task, bwrap_provider):
    files = {
        "calc.py": "def add(a, b):\n    return a + b\n",
        "tests/test_calc.py": CALC_TEST,
        "tests/test_slow.py": SLOW,
    }
    task = make_task(workspace=files, command=COMMAND)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        slow = await run_tests(sb, COMMAND, selector="tests/test_slow.py", timeout_s=3)
        assert slow.runner == "warm" and slow.timed_out and slow.integrity == "missing"
        left = await sb.exec('ls -a "${TMPDIR:-/tmp}" | grep -c "^.inhabit-" || true')
        assert left.stdout.strip() == "0"
        fast = await run_tests(sb, COMMAND, selector="tests/test_calc.py", timeout_s=60)
        assert fast.runner == "warm" and fast.passed == ["tests/test_calc.py::test_add"]
    assert bwrap_provider.exec_counts["warm_starts"] == 1


@needs_bwrap
async def test_the_switch_turns_it_off(make_task):
    task = make_task(
        workspace={"calc.py": "def add(a, b):\n    return a + b\n", "tests/test_calc.py": CALC_TEST}
    )
    provider = create_provider(SandboxConfig(backend="bwrap", warm_tests=False))
    try:
        async with await provider.create(task.workspace_dir) as sb:
            result = await run_tests(sb, COMMAND, timeout_s=60)
            assert result.runner == "cold: warm test runs are off (sandbox.warm_tests)"
            assert result.passed == ["tests/test_calc.py::test_add"]
    finally:
        await provider.close()


STOP_WORKER = """import os, signal
for pid in [int(p) for p in os.listdir("/proc") if p.isdigit() and p != "1"]:
    try:
        cmdline = open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        continue
    if b"del sys.path[0]" in cmdline:  # the worker (its argv is its bootstrap)
        os.kill(pid, signal.SIGSTOP)
        print("stopped", pid)
"""


@needs_bwrap
async def test_a_stopped_worker_costs_one_timed_out_run_then_the_sandbox_recovers(make_task, bwrap_provider):
    files = {"calc.py": "def add(a, b):\n    return a + b\n", "tests/test_calc.py": CALC_TEST}
    task = make_task(workspace=files, command=COMMAND)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        assert (await run_tests(sb, COMMAND, timeout_s=60)).runner == "warm"
        await sb.write_file("stop.py", STOP_WORKER)
        stopped = await sb.exec("python3 stop.py")
        assert stopped.stdout.count("stopped") == 1
        hung = await run_tests(sb, COMMAND, timeout_s=2)
        assert hung.timed_out and hung.integrity == "missing"
        after = await run_tests(sb, COMMAND, timeout_s=60)
        assert after.runner == "warm" and after.passed == ["tests/test_calc.py::test_add"]


@needs_bwrap
async def test_a_command_that_replaces_pythonpath_fails_warm_as_it_fails_cold(make_task, bwrap_provider):
    files = {"src/calc.py": "def add(a, b):\n    return a + b\n", "tests/test_calc.py": CALC_TEST}
    command = "PYTHONPATH=src python -m pytest -q -p no:cacheprovider"
    task = make_task(workspace=files, command=command)
    async with await bwrap_provider.create(task.workspace_dir) as sb:
        cold = await run_tests(sb, command, timeout_s=60, warm=False)
        warm = await run_tests(sb, command, timeout_s=60)
        assert warm.runner == "warm"
        # The seal plugin's folder is not on the command's PYTHONPATH: no report, the same advice.
        assert (warm.integrity, warm.exit_code, warm.problems) == (
            cold.integrity,
            cold.exit_code,
            cold.problems,
        )
        assert "replace PYTHONPATH" in warm.problems[0]
