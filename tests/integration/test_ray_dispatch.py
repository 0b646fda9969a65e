"""Stragglers on Ray: over-sampling keeps the first G rollouts, deadlines cut slow ones, both counted.

A one-node Ray with two engine actors and one env server (real actors, a tiny model, real
sandboxes and grading). The tasks' tests sleep for the first N gradings only (a counter file on
the host, which the process backend can reach), so exactly N rollouts are slow, whichever they are.
"""

from __future__ import annotations

import asyncio
import textwrap

import pytest

ray = pytest.importorskip("ray")

from inhabit.orchestrator.config import RunConfig  # noqa: E402
from inhabit.placement.config import RayConfig  # noqa: E402
from ray_fixtures import ray_run_config, ray_session, tiny_model_folder  # noqa: E402

# slow: each test waits out a real deadline of 20-30 s (CI runs them)
pytestmark = [pytest.mark.ray, pytest.mark.slow]


def slow_task(root, name: str, slow_first: int, sleep_s: float):
    from inhabit.tasks.task import load_task

    d = root / name
    (d / "workspace" / "tests").mkdir(parents=True)
    (d / "workspace" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    counter = root / f"{name}.count"
    (d / "workspace" / "tests" / "test_calc.py").write_text(
        textwrap.dedent(f"""\
            import fcntl, time
            from calc import add

            def test_add():
                with open({str(counter)!r}, "a+") as f:
                    fcntl.flock(f, fcntl.LOCK_EX)
                    f.seek(0)
                    n = len(f.read())
                    f.write("x")
                time.sleep({sleep_s} if n < {slow_first} else 0)
                assert add(2, 3) == 5
        """)
    )
    (d / "task.toml").write_text(
        f'id = "{name}"\ninstruction = "Fix calc.py."\n[grading]\n'
        'command = "python -m pytest -q -p no:cacheprovider"\nfail_to_pass = ["tests/test_calc.py::test_add"]\n'
        "timeout_s = 300\n"
    )
    return load_task(d)


@pytest.fixture(scope="module")
def parts(tmp_path_factory):
    root = tmp_path_factory.mktemp("dispatch")
    model = tiny_model_folder(root / "model")
    cfg = ray_run_config(model, root, engines=2, concurrency=8, timeout_s=280)
    with ray_session(cfg, root / "weights") as placement:
        yield root, cfg, placement


async def runner_for(cfg: RunConfig, placement, **ray_over):
    from inhabit.placement.dispatch import DispatchRunner

    pool = await placement.start_engines(cfg.model.path)
    servers = await placement.start_env_servers()
    rc = RayConfig.model_validate({**cfg.placement.ray.model_dump(), **ray_over})
    return DispatchRunner(
        pool, pool.tokenizer, None, env_servers=servers, ray=rc, harness=cfg.harness, rollout=cfg.rollout
    )


def test_oversampling_keeps_the_first_g_and_counts_the_cut(parts):
    root, cfg, placement = parts
    task = slow_task(root, "over", slow_first=2, sleep_s=200)

    async def go():
        runner = await runner_for(cfg, placement, oversample=2)
        try:
            group = await runner.run_group(task, 0)
            served = sum(runner.pool.fleet.stats()["served"])
            evals = await runner.run_group(task, -1, purpose="eval:x", size=2)
            return group, runner.metrics(), sum(runner.pool.fleet.stats()["served"]) - served, evals
        finally:
            await placement.close_fleets()

    group, m, eval_started, evals = asyncio.run(asyncio.wait_for(go(), 240))
    assert len(group.trajectories) == 2 and m["cut_surplus"] == 2 and m["lost_to_deadline"] == 0
    assert len({t.metadata["trajectory_id"] for t in group.trajectories}) == 2
    assert all(t.status in ("finished", "turn_limit") and t.grading for t in group.trajectories)
    assert eval_started == 2 and len(evals.trajectories) == 2  # evaluation never over-samples


def test_deadline_cuts_a_straggler_and_counts_it(parts):
    root, cfg, placement = parts
    task = slow_task(root, "late", slow_first=1, sleep_s=200)

    async def go():
        runner = await runner_for(cfg, placement, deadline_s=30)
        runner.cfg = cfg.rollout.model_copy(update={"group_size": 3})
        try:
            return await runner.run_group(task, 0), runner.metrics()
        finally:
            await placement.close_fleets()

    group, m = asyncio.run(asyncio.wait_for(go(), 240))
    assert m["lost_to_deadline"] == 1 and m["cut_surplus"] == 0 and m["retried"] == 0
    assert len(group.trajectories) == 2
    assert all(t.status in ("finished", "turn_limit") for t in group.trajectories)


def test_waiting_for_a_slot_counts_against_the_deadline(parts):
    """One slot: the slow first rollout holds it until the deadline cuts it; the second rollout
    spent that whole time queued, so it is cut before it starts (it used to get a full deadline
    of its own after the wait, and finish)."""
    root, cfg, placement = parts
    task = slow_task(root, "queued", slow_first=1, sleep_s=200)
    one_slot = cfg.model_copy(update={"rollout": cfg.rollout.model_copy(update={"concurrency": 1})})

    async def go():
        runner = await runner_for(one_slot, placement, deadline_s=20)
        try:
            return await runner.run_group(task, 0), runner.metrics()
        finally:
            await placement.close_fleets()

    group, m = asyncio.run(asyncio.wait_for(go(), 240))
    assert m["lost_to_deadline"] == 2 and group.trajectories == []
    assert (root / "queued.count").read_text() == "x"  # only the first rollout was ever graded
