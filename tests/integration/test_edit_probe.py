"""bench/edit_probe.py end to end on a random-init model of the multistep config's shape.

The probe's figures are only the model's if its own machinery is right: the context it rebuilds,
the calls it runs and the grading. Its control (the expert's own edit turn, run the same way) must
fix every task of every split; a random model's turns are whatever they are, counted within bounds.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # ~30 s: three expert episodes, six sampled turns, their gradings
def test_the_probes_control_fixes_every_task_of_every_split(tmp_path):
    from inhabit.config import load_config
    from inhabit.models.tiny import save_model_folder
    from inhabit.orchestrator.config import RunConfig
    from inhabit.orchestrator.prepare import build_start_model

    cfg = load_config(RunConfig, ROOT / "configs" / "multistep.toml")
    model, tok = build_start_model(cfg.model)
    folder = save_model_folder(model, tok, tmp_path / "model")
    out = tmp_path / "probe.json"
    run = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "edit_probe.py"), "--model", str(folder), "--tasks", "1",
         "--samples", "2", "--out", str(out), "sandbox.backend=process"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    splits = json.loads(out.read_text())["splits"]
    assert list(splits) == ["train, played by the bootstrap's expert", "train, not played", "held-out"]
    for name, r in splits.items():
        assert r["expert's turn fixes"] == "1/1", (name, r)
        assert r["samples"] == 2 and len(r["rows"]) == 2
        # an edit applies only if it was called, and only an applied edit is graded
        assert r["calls edit_file"] >= r["applied"] >= max(r["edits the buggy module"], r["fixes the task"])
    assert "fixes the task" in run.stdout
