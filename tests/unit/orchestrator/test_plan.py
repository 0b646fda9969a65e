"""`inhabit train CONFIG --dry-run`: the resolved config and the plan, and no work done."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from inhabit.cli import app

QUICKSTART = Path(__file__).resolve().parents[3] / "configs" / "quickstart.toml"


def test_dry_run_prints_config_and_plan_and_does_nothing(tmp_path):
    run_dir = tmp_path / "run"
    args = [
        "train",
        str(QUICKSTART),
        "--dry-run",
        f"run_dir={run_dir}",
        "steps=3",
        "placement.trainer=process",
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    config_text, plan_text = result.stdout.split("plan (dry run: nothing done):")
    config = json.loads(config_text.removeprefix("resolved config:"))
    assert config["steps"] == 3 and config["run_dir"] == str(run_dir)  # overrides applied
    plan = dict(
        line.strip().split(None, 1) for line in plan_text.strip().splitlines() if "  " in line.strip()
    )
    assert "1032 train + 32 held-out" in plan["tasks"]
    assert "3 layers x 128" in plan["model"] and "M parameters" in plan["model"]
    assert plan["steps"].startswith("3 trainer steps") and "96 in all" in plan["rollouts"]
    assert "child process" in plan["placement"]
    assert not run_dir.exists()


def test_dry_run_of_task_directories_counts_them(tmp_path):
    from inhabit.tasks.build import write_calc_task

    write_calc_task(tmp_path / "tasks" / "calc")
    cfg = tmp_path / "run.toml"
    cfg.write_text(
        f'[model]\npreset = "dense-1m"\n[tasks]\ndir = "{tmp_path / "tasks"}"\nheld_out_dir = "{tmp_path / "no"}"\n'
    )
    result = CliRunner().invoke(app, ["train", str(cfg), "--dry-run"])
    assert result.exit_code == 0, result.output
    assert "train: 1 task directories under" in result.stdout and "MISSING" in result.stdout
