"""The full quickstart (slow: about 9 minutes on a quiet 2-core machine): RL raises held-out success."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhabit.config import load_config
from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.run import train

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml"


@pytest.mark.slow
@pytest.mark.xfail(
    reason="not robust yet: RL gains -4.7 to +9.3 points over 3 seeds and reruns (README, Training)",
    strict=False,
)
def test_quickstart_learns(tmp_path):
    cfg = load_config(RunConfig, CONFIG, [f"run_dir={tmp_path / 'qs'}", 'metrics.progress="plain"'])
    summary = train(cfg)
    before = summary["eval"]["before"]["success_rate"]
    after = summary["eval"]["after"]["success_rate"]
    assert summary["eval"]["after"]["rollouts"] >= 32 * 8
    assert after > before + 0.05, (before, after)
    metrics = [json.loads(x) for x in (tmp_path / "qs" / "metrics.jsonl").read_text().splitlines()]
    assert sum("version" in m for m in metrics) == cfg.steps
