"""A task with an [environment] on Ray: the env-server actor gets the lock the driver sends, builds or
finds the environment (offline, from a wheelhouse), and rollouts on engine actors are graded in it.

The task's tests import a third-party package (tinydep, a wheel written by the test): in its
environment they collect and run (the untouched code fails its assertion); without it they could
not even be collected."""

from __future__ import annotations

import asyncio
import os

import pytest

ray = pytest.importorskip("ray")

from env_fixtures import TINYDEP, write_quad_task  # noqa: E402
from inhabit.envs.wheels import write_wheel  # noqa: E402
from ray_fixtures import ray_run_config, ray_session, tiny_model_folder  # noqa: E402

pytestmark = pytest.mark.ray


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    from inhabit.envs.lock import lock_requirements
    from inhabit.envs.requirements import project_requirements
    from inhabit.envs.task_env import write_environment

    root = tmp_path_factory.mktemp("rayenv")
    wheels = root / "wheels"
    wheels.mkdir()
    write_wheel(wheels, "tinydep", "1.0", TINYDEP)
    # Set before Ray starts, so the actors' processes (the env server's store and installs) see them.
    saved = {k: os.environ.get(k) for k in ("INHABIT_CACHE_DIR", "INHABIT_WHEELHOUSE")}
    os.environ["INHABIT_CACHE_DIR"] = str(root / "cache")
    os.environ["INHABIT_WHEELHOUSE"] = str(wheels)
    task_dir = write_quad_task(root / "tasks" / "quad")
    write_environment(
        task_dir, lock_requirements(project_requirements(task_dir / "workspace"), wheelhouse=wheels)
    )
    model = tiny_model_folder(root / "model")
    cfg = ray_run_config(model, root / "tasks", engines=1, concurrency=4, timeout_s=200)
    try:
        with ray_session(cfg, root / "weights") as placement:
            yield root, cfg, placement, task_dir
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def test_rollouts_on_ray_are_graded_in_the_tasks_environment(setup):
    from inhabit.envs.store import EnvStore
    from inhabit.placement.dispatch import DispatchRunner
    from inhabit.tasks.task import load_task

    root, cfg, placement, task_dir = setup
    task = load_task(task_dir)

    async def go():
        pool = await placement.start_engines(cfg.model.path)
        servers = await placement.start_env_servers()
        runner = DispatchRunner(
            pool, pool.tokenizer, None, env_servers=servers, ray=cfg.placement.ray,
            harness=cfg.harness, rollout=cfg.rollout,
        )  # fmt: skip
        try:
            return await runner.run_group(task, 0)
        finally:
            await placement.close_fleets()

    group = asyncio.run(asyncio.wait_for(go(), 240))
    assert len(group.trajectories) == 2
    for traj in group.trajectories:
        assert traj.status in ("finished", "turn_limit"), traj.error
        # Collected and run in the environment: the untouched code fails its assertion, and the
        # test that only needs tinydep passes (without the environment both fail to import it).
        assert traj.grading["outcomes"] == {
            "tests/test_quad.py::test_quadruple": "failed",
            "tests/test_quad.py::test_dep": "passed",
        }, traj.grading
        assert not traj.grading["collection_errors"]
    assert EnvStore(root / "cache" / "envs").get(task.environment.id) is not None  # built once, from the lock
