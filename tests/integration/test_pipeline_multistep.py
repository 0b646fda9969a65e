"""configs/multistep.toml end to end, shortened (slow: a few minutes on a 2-core machine): tasks
generated, the scripted expert's transcripts through the real harness, a bootstrap, async RL steps
whose episodes overflow the 1,024-token window and summarize, and summary segments in the trainer's
samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhabit.config import load_config
from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.prepare import EXPERT_FILE
from inhabit.orchestrator.run import train
from inhabit.types import Trajectory

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "multistep.toml"


@pytest.mark.slow
def test_multistep_run_summarizes_and_trains_summary_segments(tmp_path):
    run_dir = tmp_path / "ms"
    cfg = load_config(
        RunConfig,
        CONFIG,
        [
            f"run_dir={run_dir}", 'metrics.progress="plain"', "tasks.count=20", "tasks.held_out=2",
            "model.bootstrap.steps=8", "model.bootstrap.batch_size=2", "steps=2", "rollout.group_size=2",
            "rollout.tasks_per_step=2", "eval.samples=1",
            # a barely bootstrapped model earns 0 on every rollout, so every group has zero advantage;
            # train them anyway, to see which samples reach the trainer
            "rollout.train_zero_advantage=true",
        ],
    )  # fmt: skip
    summary = train(cfg)
    assert summary["steps"] == 2
    info = summary["prepare"]
    assert info["expert_transcripts"] == 9  # bootstrap.share = 0.5 of the 18 train tasks, all solved
    assert info["expert_examples"] > info["expert_transcripts"]  # summary segments are examples too
    model_dir = next((run_dir / "cache").glob("model-*"))
    expert = [Trajectory.from_json(x) for x in (model_dir / EXPERT_FILE).read_text().splitlines()]
    assert all(t.reward == 1.0 for t in expert) and any(t.summaries for t in expert)

    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [s for s in steps if "version" in s]
    assert len(steps) == 2
    # the policy's own episodes overflow the window: summaries happen, and their segments are trained
    assert sum(s["summaries_per_episode"] for s in steps) > 0
    assert sum(s["summary_segment_samples"] for s in steps) > 0
    assert all(s["summary_segment_samples"] <= s["samples"] for s in steps)
    assert summary["eval"]["after"]["tasks"] == 2
