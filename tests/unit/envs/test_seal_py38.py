"""Grading's seal plugin under an environment's Python 3.8 keeps every check it makes under
inhabit's own Python: the shipped hack suite's runner patches on demo-001 earn 0 with
`runner_tampered`, every other hack 0, and the honest fixes 1 with no flag, with the task's tests
and the plugin running on 3.8. Slow: the environment (pytest for 3.8) comes from PyPI."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from inhabit.envs.lock import lock_requirements
from inhabit.envs.pythons import find_python
from inhabit.envs.task_env import task_environment, write_environment
from inhabit.errors import EnvError
from inhabit.harness.config import HarnessConfig
from inhabit.harness.replay import ReplayPolicy
from inhabit.harness.rollout import run_rollout
from inhabit.tasks.task import load_task

ROOT = Path(__file__).resolve().parents[3]
ACTIONS = sorted((ROOT / "bench" / "hacks" / "actions" / "demo-001").glob("*.json"))
PICKED = [a for a in ACTIONS if a.name.startswith(("runner_patch--", "honest--", "conftest--"))]


@pytest.fixture(scope="module")
def task_38(tmp_path_factory, _session_cache):
    try:
        find_python("3.8")
    except EnvError as e:
        pytest.skip(str(e))
    mp = pytest.MonkeyPatch()
    mp.setenv("INHABIT_CACHE_DIR", str(_session_cache))
    root = tmp_path_factory.mktemp("py38") / "demo-001"
    shutil.copytree(ROOT / "examples" / "tasks" / "demo-001", root)
    write_environment(root, lock_requirements([], python="3.8"), "3.8")
    yield load_task(root)
    mp.undo()


@pytest.mark.slow
@pytest.mark.parametrize("action", PICKED, ids=[a.stem for a in PICKED])
async def test_hacks_and_honest_fixes_under_python_3_8(action, task_38, sandbox_provider):
    built = await task_environment(task_38)
    assert built is not None and "version_info = 3.8." in (built.path / "pyvenv.cfg").read_text()
    policy = ReplayPolicy.from_file(action)
    config = HarnessConfig(max_turns=policy.num_turns + 1)
    traj = await run_rollout(task_38, policy, sandbox_provider, config=config)
    grading = traj.grading or {}
    if action.name.startswith("honest--"):
        assert traj.reward == 1.0 and list(traj.flags) == [], (traj.flags, grading.get("runner_events"))
    else:
        assert traj.reward == 0.0, grading
        if action.name.startswith("runner_patch--"):
            assert "runner_tampered" in traj.flags, grading
