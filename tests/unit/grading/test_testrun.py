"""run_tests in a real sandbox: outcomes from the sealed XML, the report path hidden from the code
under test, nothing left behind in the workspace, and tampering caught."""

from __future__ import annotations

import json

from inhabit.grading.testrun import run_tests
from inhabit.tasks.build import CALC_FIXED

SPY = """import json, os, sys

def test_spy():
    with open("spy.json", "w") as f:
        json.dump({"argv": sys.argv, "env": dict(os.environ)}, f)
"""


async def test_outcomes_summary_and_render(calc_task, sandbox_provider):
    async with await sandbox_provider.create(calc_task.workspace_dir) as sandbox:
        result = await run_tests(sandbox, calc_task.grading.command, timeout_s=60)
        assert result.integrity == "ok"
        assert result.outcomes == {
            "tests/test_calc.py::test_add": "failed",
            "tests/test_calc.py::test_sub": "passed",
        }
        assert result.exit_code == 1
        assert result.summary.startswith("1 passed, 1 failed")
        text = result.render()
        assert "FAILED tests/test_calc.py::test_add - assert -1 == 5" in text
        assert "test_sub" not in text  # passing tests are only counted

        await sandbox.write_file("calc.py", CALC_FIXED)
        only_add = await run_tests(
            sandbox, calc_task.grading.command, selector="tests/test_calc.py::test_add", timeout_s=60
        )
        assert only_add.outcomes == {"tests/test_calc.py::test_add": "passed"}
        assert only_add.passed == ["tests/test_calc.py::test_add"]


async def test_report_path_is_invisible_to_code_under_test_and_leaves_nothing(make_task, sandbox_provider):
    task = make_task(workspace={"tests/test_spy.py": SPY}, pass_to_pass=["tests/test_spy.py::test_spy"])
    async with await sandbox_provider.create(task.workspace_dir) as sandbox:
        before = {e.path for e in await sandbox.list_files(".")}
        result = await run_tests(sandbox, task.grading.command, timeout_s=60)
        assert result.outcomes == {"tests/test_spy.py::test_spy": "passed"}
        spy = json.loads(await sandbox.read_file("spy.json"))
        seen = json.dumps(spy)
        assert "junit" not in seen and "report.xml" not in seen
        for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP"):
            assert name not in spy["env"]
        after = {e.path for e in await sandbox.list_files(".")}
        assert after - before == {"spy.json"}  # no report, seal or plugin left in the workspace
        leftovers = await sandbox.exec('ls -a "${TMPDIR:-/tmp}" | grep -c "^.inhabit-" || true')
        assert leftovers.stdout.strip() == "0"


async def test_hostile_environment_variables_are_removed(make_task, sandbox_provider):
    task = make_task(workspace={"tests/test_spy.py": SPY}, pass_to_pass=["tests/test_spy.py::test_spy"])
    hostile = {
        "PYTEST_ADDOPTS": "-k nothing",
        "PYTEST_PLUGINS": "evil",
        "PYTHONPATH": "/evil",
        "PYTHONSTARTUP": "x",
    }
    async with await sandbox_provider.create(task.workspace_dir) as sandbox:
        result = await run_tests(sandbox, task.grading.command, timeout_s=60, env=hostile)
        assert result.outcomes == {"tests/test_spy.py::test_spy": "passed"}
        spy = json.loads(await sandbox.read_file("spy.json"))
        for name in ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTHONSTARTUP"):
            assert name not in spy["env"]
        assert "/evil" not in spy["env"]["PYTHONPATH"]


async def test_missing_report_is_reported_not_raised(calc_task, sandbox_provider):
    async with await sandbox_provider.create(calc_task.workspace_dir) as sandbox:
        result = await run_tests(sandbox, "python -c 'print(1)' #", timeout_s=60)
        assert result.integrity == "missing"
        assert result.outcomes == {}
        assert "no test report" in result.summary
        assert "exited with code 0" in result.render()


async def test_a_command_that_replaces_pythonpath_gets_a_clear_message(calc_task, sandbox_provider):
    async with await sandbox_provider.create(calc_task.workspace_dir) as sandbox:
        result = await run_tests(sandbox, "PYTHONPATH=. " + calc_task.grading.command, timeout_s=60)
        assert result.integrity == "missing"
        assert "replace PYTHONPATH" in result.summary
        ok = await run_tests(sandbox, 'PYTHONPATH=".:$PYTHONPATH" ' + calc_task.grading.command, timeout_s=60)
        assert ok.integrity == "ok" and len(ok.outcomes) == 2


async def test_deleting_the_seal_at_exit_is_tampering(calc_task, sandbox_provider):
    cheat = (
        "import atexit, os, shutil\n\n"
        "def _gone():\n"
        "    base = os.environ.get('TMPDIR', '/tmp')\n"
        "    for d, _, names in os.walk(base):\n"
        "        for n in names:\n"
        "            if n == 'seal.json':\n"
        "                os.remove(os.path.join(d, n))\n\n"
        "atexit.register(_gone)\n\n" + CALC_FIXED
    )
    async with await sandbox_provider.create(calc_task.workspace_dir) as sandbox:
        await sandbox.write_file("calc.py", cheat)
        result = await run_tests(sandbox, calc_task.grading.command, timeout_s=60)
        assert result.integrity == "tampered"
        assert "TAMPERED" in result.summary


async def test_timeout(make_task, sandbox_provider):
    task = make_task(
        workspace={"tests/test_slow.py": "import time\n\ndef test_slow():\n    time.sleep(30)\n"},
        pass_to_pass=["tests/test_slow.py::test_slow"],
    )
    async with await sandbox_provider.create(task.workspace_dir) as sandbox:
        result = await run_tests(sandbox, task.grading.command, timeout_s=2)
        assert result.timed_out and result.integrity == "missing"
        assert "timed out" in result.summary


DOCTESTED = (
    '"""Doubles."""\n\n\ndef double(x):\n    """\n    >>> double(2)\n    4\n    """\n    return 2 * x\n'
)
ASYNC_PEEK = "import unittest\n\n\ndef test_peek():\n    assert unittest.IsolatedAsyncioTestCase.__name__ == 'IsolatedAsyncioTestCase'\n"


async def test_classes_the_runner_makes_on_first_use_are_not_tampering(make_task, sandbox_provider):
    # pytest's doctest plugin sets _pytest.doctest.RUNNER_CLASS / CHECKER_CLASS when it first runs
    # a doctest, and unittest imports IsolatedAsyncioTestCase on first access: runner code filling
    # its own empty globals, after the snapshot was taken.
    task = make_task(workspace={"dbl.py": DOCTESTED, "tests/test_peek.py": ASYNC_PEEK})
    async with await sandbox_provider.create(task.workspace_dir) as sandbox:
        result = await run_tests(sandbox, task.grading.command + " --doctest-modules", timeout_s=60)
        assert result.outcomes == {"dbl.py::dbl.double": "passed", "tests/test_peek.py::test_peek": "passed"}
        assert result.tampering == ()


async def test_a_runner_class_the_code_under_test_puts_in_an_empty_global_is_tampering(
    make_task, sandbox_provider
):
    # Before pytest makes its doctest runner, code under test puts its own there: a stdlib
    # DocTestRunner, which prints failures instead of recording them, so every doctest passes.
    cheat = (
        "import doctest\n\nimport _pytest.doctest\n\n\n"
        "class PytestDoctestRunner(doctest.DocTestRunner):\n"
        "    def __init__(self, checker=None, verbose=None, optionflags=0, continue_on_failure=True):\n"
        "        super().__init__(checker=checker, verbose=verbose, optionflags=optionflags)\n\n\n"
        "PytestDoctestRunner.__module__ = '_pytest.doctest'\n"
        "_pytest.doctest.RUNNER_CLASS = PytestDoctestRunner\n"
    )
    wrong = DOCTESTED.replace("return 2 * x", "return 3 * x")
    task = make_task(
        workspace={"dbl.py": wrong, "tests/test_cheat.py": "import cheat  # noqa\n", "cheat.py": cheat}
    )
    async with await sandbox_provider.create(task.workspace_dir) as sandbox:
        result = await run_tests(sandbox, task.grading.command + " --doctest-modules", timeout_s=60)
        assert any("RUNNER_CLASS" in event for event in result.tampering), result.tampering


WARN_UP = "import warnings\n\n\ndef test_warns_at_its_caller():\n    warnings.warn('noted', UserWarning, stacklevel=2)\n"


async def test_a_warning_attributed_to_the_runner_is_not_tampering(make_task, sandbox_provider):
    # The warnings module records a warning in the globals of the frame it is attributed to (here
    # pytest's, which called the test): `__warningregistry__` is data, not a patch.
    task = make_task(workspace={"tests/test_warn.py": WARN_UP})
    async with await sandbox_provider.create(task.workspace_dir) as sandbox:
        result = await run_tests(sandbox, task.grading.command, timeout_s=60)
        assert result.outcomes == {"tests/test_warn.py::test_warns_at_its_caller": "passed"}
        assert result.tampering == ()
