"""scripts/gpu-check.sh is only run on a CUDA machine; here its shell parses and the run settings it
passes to `inhabit train` are ones the run config accepts, so the one call it makes on a GPU
machine does not stop at a typo."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

from inhabit.config import load_config
from inhabit.orchestrator.config import RunConfig

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu-check.sh"


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


def test_its_lora_runs_use_settings_the_run_config_accepts() -> None:
    text = SCRIPT.read_text()
    short = shlex.split(re.search(r"SHORT=\((.*?)\)", text, re.S).group(1))
    assert "trainer.lora.rank=8" in short and "trainer.device=cuda" in short
    for extra in (["engine.device=cuda"], ["engine.backend=vllm"]):
        cfg = load_config(
            RunConfig, ROOT / "configs" / "smollm2-quickstart.toml", [*short, *extra, "run_dir=/tmp/x"]
        )
        assert cfg.steps == 3 and cfg.trainer.lora is not None and cfg.trainer.lora.rank == 8
