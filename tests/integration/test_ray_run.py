"""`inhabit train` with `placement = "ray"` on a 3-node `ray.cluster_utils.Cluster` (one machine).

Nodes: the head offers `trainer`, one node `rollout` (engine actors), one `sandbox` (env-server
actors), one CPU each; actors ask for no CPU and one unit of their pool's resource, so where
each part runs is decided by the custom resources alone. Real parts throughout: a tiny model
built from a spec, embedded engines in actors, env servers over HTTP, grading, the trainer and
the weight store. Faults are real too: an engine actor is killed, a sandbox node removed, the
trainer killed; trajectories are counted by id.
"""

from __future__ import annotations

import json
import threading
import time

import pytest

ray = pytest.importorskip("ray")

from ray.cluster_utils import Cluster  # noqa: E402

from inhabit.config import load_config  # noqa: E402
from inhabit.orchestrator.config import RunConfig  # noqa: E402
from run_fixtures import merged, tiny_run  # noqa: E402

# slow: a Ray cluster of three nodes and two whole runs, the faults one ~80-130 s on 2 cores (CI runs them)
pytestmark = [pytest.mark.ray, pytest.mark.slow]

# The tiny run (tests/run_fixtures.py) on the cluster's pools: every actor by its custom resource.
RAY_RUN = {
    "checkpoint_every": 1,
    "sandbox": {"backend": "process"},
    "rollout": {"timeout_s": 120},
    "eval": {"before": False, "after": False},
    "metrics": {"progress": "off"},
    "placement": {
        "ray": {
            "engines": 2,
            "env_servers": 2,
            "bind_host": "127.0.0.1",
            "engine": {"num_cpus": 0, "resources": {"rollout": 1}},
            "env_server": {"num_cpus": 0, "resources": {"sandbox": 1}},
            "trainer": {"num_cpus": 0, "resources": {"trainer": 1}},
        }
    },
}


@pytest.fixture(scope="module")
def cluster():
    c = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "resources": {"trainer": 1}, "include_dashboard": False},
    )
    try:
        nodes = {
            "rollout": c.add_node(num_cpus=1, resources={"rollout": 2}),
            "sandbox": c.add_node(num_cpus=1, resources={"sandbox": 2}),
        }
        c.wait_for_nodes()
        c.nodes = nodes  # type: ignore[attr-defined]
        yield c
    finally:
        if ray.is_initialized():
            ray.shutdown()
        c.shutdown()


def write(tmp_path, steps: int, backend: str) -> str:
    return tiny_run(tmp_path, merged(RAY_RUN, {"steps": steps, "placement": {"backend": backend}}))[0]


def config(tmp_path, cluster, steps=2, overrides=()) -> RunConfig:
    over = ["placement.backend=ray", f"placement.ray.address={cluster.address}", *overrides]
    return load_config(RunConfig, write(tmp_path, steps, "local"), over)


def trajectories(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]


def step_records(run_dir) -> list[dict]:
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if "version" in r and "eval" not in r]


def test_small_run_completes_on_the_cluster(tmp_path, cluster):
    """The same config as a local run; `--ray-address` alone moves it onto the cluster."""
    from typer.testing import CliRunner

    from inhabit.cli import app

    result = CliRunner().invoke(app, ["train", write(tmp_path, 2, "local"), "--ray-address", cluster.address])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    run_dir = tmp_path / "run"
    # the nodes each part landed on are checked in the fault test, which holds its placement
    assert summary["steps"] == 2 and summary["version"] == 2
    recs = step_records(run_dir)
    assert [r["step"] for r in recs] == [1, 2]
    last = recs[-1]["dispatch"]
    assert last["engines"]["live"] == 2 and last["env_servers"]["live"] == 2
    assert sum(last["engines"]["served"]) >= 8  # both engines took rollouts: least outstanding work
    assert min(last["engines"]["served"]) >= 1
    trajs = [t for t in trajectories(run_dir) if t["metadata"]["purpose"] == "train"]
    ids = [t["metadata"]["trajectory_id"] for t in trajs]
    assert len(ids) == len(set(ids)) >= 8
    assert min(last["env_servers"]["served"]) >= 1
    assert all(t["status"] in ("finished", "turn_limit") for t in trajs), [t["error"] for t in trajs]
    # weights travelled through the store: one folder of versions 0..2
    assert (run_dir / "weights" / "i001" / "LATEST").read_text().strip() in ("2", "000000000002")


# ---------------------------------------------------------------------------------- faults


class Background:
    """`train(cfg)` in a thread, so that the test can inject a fault while it runs."""

    def __init__(self, cfg: RunConfig, placement) -> None:
        from inhabit.orchestrator.run import train

        self.result: dict | None = None
        self.error: BaseException | None = None

        def target() -> None:
            try:
                self.result = train(cfg, placement=placement)
            except BaseException as e:  # surfaced by join()
                self.error = e

        self.thread = threading.Thread(target=target, daemon=True)
        self.thread.start()

    def wait_for(self, cond, timeout_s: float = 240.0, what: str = "") -> None:
        deadline = time.monotonic() + timeout_s
        while not cond():
            assert self.thread.is_alive(), f"the run ended before {what}: {self.error or self.result!r}"
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.05)

    def join(self, timeout_s: float = 300.0) -> dict:
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the run did not finish in time"
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def steps_done(run_dir) -> int:
    path = run_dir / "metrics.jsonl"
    return len(step_records(run_dir)) if path.exists() else 0


def check_groups_whole(run_dir, group_size: int) -> list[dict]:
    """Every logged train group has each of its G rollouts exactly once (none lost, none twice)."""
    trajs = [t for t in trajectories(run_dir) if t["metadata"]["purpose"] == "train"]
    # A resumed run generates the groups after its checkpoint again: ids are unique per run attempt.
    ids = [(t["metadata"]["run_attempt"], t["metadata"]["trajectory_id"]) for t in trajs]
    assert len(ids) == len(set(ids)), "a rollout was recorded twice"
    by_group: dict[tuple[int, int], list[int]] = {}
    for t in trajs:
        key = (t["metadata"]["run_attempt"], t["metadata"]["group"])
        by_group.setdefault(key, []).append(t["metadata"]["rollout"])
    for g, rollouts in by_group.items():
        assert sorted(rollouts) == list(range(group_size)), (g, rollouts)
    return trajs


def test_faults_engine_killed_sandbox_node_lost_trainer_killed(tmp_path, cluster):
    """One run, three faults in turn (one run keeps the suite short on a small machine):

    1. an engine actor is killed with rollouts on it: they are retried on the other engine, and
       Ray restarts the actor, which rejoins dispatch;
    2. the node of a busy env server is removed: its rollouts are retried on the other server;
       when a node with the `sandbox` resource joins again, the server is restarted there;
    3. the trainer actor is killed: the run resumes from its newest checkpoint and goes on.
    The run is long enough never to end by itself while the faults play out (a restart can take
    half a minute on a loaded machine); a STOP file ends it once they have.
    """
    extra = cluster.add_node(num_cpus=1, resources={"sandbox": 2})
    cluster.wait_for_nodes()
    steps = 500
    cfg = config(
        tmp_path,
        cluster,
        steps=steps,
        overrides=["placement.ray.env_server.resources.sandbox=2", "harness.max_turns=3"],
    )
    from inhabit.placement.cluster import RayPlacement

    placement = RayPlacement(cfg)  # the test's handle on the run's actors
    run = Background(cfg, placement)
    run_dir = tmp_path / "run"
    run.wait_for(lambda: steps_done(run_dir) >= 1, what="step 1")
    engines, servers = placement.engines, placement.env_servers
    assert {m.info["node_id"] for m in engines.members} == {cluster.nodes["rollout"].node_id}
    assert {m.info["node_id"] for m in servers.members} == {cluster.nodes["sandbox"].node_id, extra.node_id}

    # 1. engine actor killed (Ray restarts it at once: its node still has capacity)
    run.wait_for(lambda: engines.members[0].outstanding >= 2, what="rollouts on engine 0")
    ray.kill(engines.members[0].handle, no_restart=False)
    run.wait_for(lambda: engines.revived >= 1, what="engine 0 to come back")

    # 2. the node under a busy env server goes away; later a new sandbox node joins
    run.wait_for(lambda: any(m.live and m.outstanding >= 1 for m in servers.members), what="busy server")
    victim = next(m for m in servers.members if m.live and m.outstanding >= 1)
    node = next(n for n in (cluster.nodes["sandbox"], extra) if n.node_id == victim.info["node_id"])
    cluster.remove_node(node, allow_graceful=False)
    run.wait_for(lambda: servers.stats()["deaths"] >= 1, what="the dead env server to be noticed")
    cluster.nodes["sandbox"] = cluster.add_node(num_cpus=1, resources={"sandbox": 2})
    run.wait_for(lambda: servers.revived >= 1, what="the env server to come back on the new node")
    assert victim.info["node_id"] != node.node_id

    # 3. trainer killed after a checkpoint
    done = steps_done(run_dir)
    run.wait_for(lambda: steps_done(run_dir) >= done + 1, what="a step after the faults")
    before = step_records(run_dir)[-1]["dispatch"]
    ray.kill(placement.trainer_handle, no_restart=True)
    run.wait_for(lambda: placement.trainer_restarts == 1, what="the trainer to be restarted")
    done = steps_done(run_dir)
    run.wait_for(lambda: steps_done(run_dir) >= done + 1, what="a step after the trainer restart")
    (run_dir / "STOP").touch()
    summary = run.join()

    assert summary["stopped"] and summary["steps"] == summary["version"] < steps
    assert not (run_dir / "STOP").exists()  # consumed: `--resume` would go on
    assert summary["trainer_restarts"] == 1
    assert before["retried"] >= 2  # the engine's and the env server's rollouts
    assert before["engines"]["live"] == 2 and before["env_servers"]["live"] == 2
    recs = step_records(run_dir)
    assert recs[-1]["step"] == summary["steps"] and recs[-1]["dispatch"]["trainer_restarts"] == 1
    assert (run_dir / "weights" / "i002" / "LATEST").exists()  # the resumed trainer's store
    trajs = check_groups_whole(run_dir, cfg.rollout.group_size)
    retried = [t for t in trajs if t["metadata"]["attempts"] > 1]
    assert len(retried) >= 2
    assert all(t["status"] in ("finished", "turn_limit") for t in trajs), [t["error"] for t in trajs]
