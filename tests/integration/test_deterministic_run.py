"""Two `inhabit train` runs in sync mode with the same seed and deterministic mode (engine and
trainer) give the same metrics step by step, the same rollouts token for token, and the same final
weights; and the trainer's logged mismatch is exactly 0 with every importance ratio exactly 1.

The run is the smallest one that goes through the real path (tests/integration/test_pipeline_run.py:
generated tasks, a tiny model from a spec, the embedded engine, the harness, sandboxes, grading).
Its model is random, so every reward is 0 and the advantages (hence the updates) are 0: the weight
comparison checks the plumbing (checkpoint, swap), the rollouts and metrics carry the signal.
About 2 x 45 s on a loaded 2-core machine, hence `slow`.
"""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from inhabit.cli import app
from run_fixtures import tiny_run


def run(tmp_path, name: str) -> dict:
    changes = {"mode": "sync", "engine": {"deterministic": True}, "trainer": {"deterministic": True}}
    path, run_dir = tiny_run(tmp_path, changes, name=name)
    result = CliRunner().invoke(app, ["train", path])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in metrics if "version" in m and "eval" not in m]
    trajs = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    turns = sorted(
        json.dumps(
            [
                t["task_id"],
                [[u["completion_token_ids"], u["logprobs"]] for s in t["segments"] for u in s["turns"]],
            ]
        )
        for t in trajs
    )
    weights = (run_dir / "checkpoints" / "v000002" / "model.safetensors").read_bytes()
    return {"steps": steps, "turns": turns, "weights": weights}


@pytest.mark.slow
def test_two_deterministic_sync_runs_are_identical(tmp_path):
    a, b = run(tmp_path, "a"), run(tmp_path, "b")
    assert len(a["steps"]) == len(b["steps"]) == 2
    for x, y in zip(a["steps"], b["steps"], strict=True):
        assert x["reward"] == y["reward"]
        assert x["trainer"]["loss"] == y["trainer"]["loss"]
        assert x["completion_tokens"] == y["completion_tokens"]
        assert x["trainer"]["mismatch_max_abs"] == 0.0 and y["trainer"]["mismatch_max_abs"] == 0.0
        assert x["trainer"]["ratio_min"] == x["trainer"]["ratio_max"] == 1.0
    assert a["turns"] == b["turns"] and len(a["turns"]) > 0
    assert a["weights"] == b["weights"]
