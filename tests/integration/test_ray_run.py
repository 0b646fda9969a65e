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

pytestmark = pytest.mark.ray

TINY = """
mode = "async"
max_staleness = 1
steps = {steps}
seed = 0
run_dir = "{run_dir}"
threads = 1
checkpoint_every = 1
[model]
spec = {{ hidden_size = 32, num_layers = 1, num_heads = 2, num_kv_heads = 1, intermediate_size = 64, max_position_embeddings = 512 }}
tokenizer = "quickstart"
[tasks]
source = "quickstart"
count = 6
held_out = 2
[harness]
max_turns = 2
[engine]
max_model_len = 512
seed = 0
[sandbox]
backend = "process"
[rollout]
group_size = 2
tasks_per_step = 2
concurrency = 8
max_tokens = 12
train_zero_advantage = true
timeout_s = 120
[trainer]
lr = 1e-3
[eval]
before = false
after = false
[metrics]
tensorboard = false
progress = "off"
[placement]
backend = "ray"
[placement.ray]
address = "{address}"
engines = 2
env_servers = 2
bind_host = "127.0.0.1"
engine = {{ num_cpus = 0, resources = {{ rollout = 1 }} }}
env_server = {{ num_cpus = 0, resources = {{ sandbox = 1 }} }}
trainer = {{ num_cpus = 0, resources = {{ trainer = 1 }} }}
"""


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


def config(tmp_path, cluster, steps=2, overrides=()) -> RunConfig:
    path = tmp_path / "ray.toml"
    path.write_text(TINY.format(steps=steps, run_dir=tmp_path / "run", address=cluster.address))
    return load_config(RunConfig, path, list(overrides))


def trajectories(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]


def step_records(run_dir) -> list[dict]:
    recs = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r for r in recs if "version" in r and "eval" not in r]


def test_small_run_completes_with_parts_on_their_nodes(tmp_path, cluster):
    from inhabit.orchestrator.run import train

    summary = train(config(tmp_path, cluster))
    run_dir = tmp_path / "run"
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
