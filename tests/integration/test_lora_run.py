"""`inhabit train` with `[trainer.lora]` on a tiny model: steps publish merged versions into the
engine, checkpoints hold the adapter, `--resume` continues from one (real parts, as in
test_pipeline_run.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_pipeline_run import records, write_config
from typer.testing import CliRunner

from inhabit.cli import app


def lora_config(tmp_path, steps: int) -> str:
    path = Path(write_config(tmp_path, "async", steps))
    path.write_text(path.read_text() + "[trainer.lora]\nrank = 2\nalpha = 4.0\n")
    return str(path)


@pytest.mark.slow
def test_a_lora_run_trains_publishes_and_resumes(tmp_path):
    from transformers import AutoModelForCausalLM

    runner = CliRunner()
    first = runner.invoke(app, ["train", lora_config(tmp_path, 1)])
    assert first.exit_code == 0, first.output
    run_dir = tmp_path / "run-async"
    result = runner.invoke(app, ["train", lora_config(tmp_path, 2), "--resume"])
    assert result.exit_code == 0, result.output
    steps = [r for r in records(run_dir) if "version" in r and "eval" not in r]
    assert [r["version"] for r in steps] == [1, 2]
    assert json.loads((run_dir / "summary.json").read_text())["version"] == 2
    checkpoints = sorted((run_dir / "checkpoints").glob("v*"))
    last = checkpoints[-1]
    assert last.name == "v000002" and (last / "adapter" / "adapter_model.safetensors").is_file()
    # the servable folder is a plain model (rewards of a random model are all 0, so the adapters
    # get no gradient here: test_lora.py checks the merge itself), the adapter a peft one
    from safetensors.torch import load_file

    merged = AutoModelForCausalLM.from_pretrained(last, local_files_only=True).state_dict()
    assert not any("lora" in n for n in merged)
    adapter = load_file(str(last / "adapter" / "adapter_model.safetensors"))
    assert {n.rsplit(".", 2)[-2] for n in adapter} == {"lora_A", "lora_B"}
    assert all(t.shape[0] == 2 for n, t in adapter.items() if ".lora_A." in n)  # rank 2
