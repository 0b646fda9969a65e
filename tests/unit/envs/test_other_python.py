"""An environment made for another Python than inhabit's: built with that interpreter (a pyenv
version on this machine), the task's tests and grading's seal plugin run under it in the sandbox,
and the task checks. Offline: the fixture wheel plus inhabit's own pytest, repacked (pure Python,
so it installs on any newer interpreter). Skipped where the machine has no second Python."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

import inhabit.grading
from inhabit.envs.lock import lock_requirements
from inhabit.envs.pythons import find_python
from inhabit.envs.requirements import project_requirements
from inhabit.envs.task_env import task_environment, write_environment
from inhabit.errors import EnvError
from inhabit.grading.check import check_task
from inhabit.tasks.task import load_task

# Its file, never imported here (importing it installs an audit hook in this process).
PLUGIN = Path(inhabit.grading.__file__).parent / "seal_plugin.py"


def _other_python() -> str:
    """A Python newer than inhabit's that this machine has (inhabit's pytest wheels fit it)."""
    for minor in range(sys.version_info.minor + 1, sys.version_info.minor + 4):
        version = f"{sys.version_info.major}.{minor}"
        try:
            find_python(version)
        except EnvError:
            continue
        return version
    pytest.skip("no Python newer than inhabit's on this machine (pyenv or uv)")


async def test_task_with_another_python_builds_with_it_and_checks(dep_task, wheelhouse, sandbox_provider):
    version = _other_python()
    root = dep_task(with_env=False)
    reqs = project_requirements(root / "workspace")
    write_environment(root, lock_requirements(reqs, python=version, wheelhouse=wheelhouse), version)
    task = load_task(root)
    assert task.environment is not None and task.environment.python == version
    built = await task_environment(task, wheelhouse=wheelhouse)
    assert built is not None and f"version_info = {version}." in (built.path / "pyvenv.cfg").read_text()
    sandbox = await sandbox_provider.create(task.workspace_dir, env=built.path)
    try:
        result = await sandbox.exec("python -c 'import sys, tinydep; print(sys.version_info[:2])'")
    finally:
        await sandbox.close()
    assert result.exit_code == 0 and result.stdout.strip() == str(tuple(map(int, version.split(".")))), result
    check = await check_task(root, sandbox_provider)
    assert check.valid, check.problem_lines()


@pytest.mark.parametrize("minor", [8, 9, 10])
def test_seal_plugin_is_valid_python_back_to_3_8(minor):
    """The plugin runs under the environment's interpreter: its syntax must hold on 3.8 and up
    (parsed with that grammar here; the slow SWE-bench test runs it under a real 3.8)."""
    ast.parse(PLUGIN.read_text(), feature_version=(3, minor))
    try:
        exe = find_python(f"3.{minor}")
    except EnvError:
        return
    import subprocess

    proc = subprocess.run([str(exe), "-c", f"compile(open({str(PLUGIN)!r}).read(), 'p', 'exec')"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
