"""`inhabit train configs/quickstart-native.toml`, shrunk: a native-format RL step runs and logs
`split_turns`.

The shipped config with overrides that make it small (a tiny random model, a few tasks, one step).
Everything is real: the quickstart-native tokenizer and template, the embedded engine, the harness
in the native format (tools given to the template, calls parsed by the hermes parser, observations
as `tool` messages), sandboxes, grading and the trainer. The model is random, so rewards are all 0;
`rollout.train_zero_advantage` makes the step train anyway.
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.harness.prompts import NATIVE_SYSTEM

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "quickstart-native.toml"


def test_a_native_format_step_trains_and_logs_split_turns(tmp_path):
    run_dir = tmp_path / "run"
    overrides = [
        f"run_dir={run_dir}",
        "steps=2",
        "mode=sync",
        "max_staleness=0",
        "model.spec.hidden_size=32",
        "model.spec.num_layers=1",
        "model.spec.num_heads=2",
        "model.spec.num_kv_heads=1",
        "model.spec.intermediate_size=64",
        "model.bootstrap.steps=0",
        "tasks.count=6",
        "tasks.held_out=2",
        "harness.max_turns=2",
        "rollout.group_size=2",
        "rollout.tasks_per_step=2",
        "rollout.max_tokens=16",
        "rollout.train_zero_advantage=true",
        "eval.before=false",
        "eval.after=false",
        "metrics.tensorboard=false",
        'metrics.progress="plain"',
    ]
    result = CliRunner().invoke(app, ["train", str(CONFIG), *overrides])
    assert result.exit_code == 0, result.output
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "version" in r and "eval" not in r]
    assert [r["step"] for r in steps] == [1, 2] and all(r["updated"] for r in steps)
    for r in steps:
        assert isinstance(r["split_turns"], int) and 0 <= r["split_turns"] <= r["samples"]
        assert r["samples"] >= 1
    trajs = [json.loads(x) for x in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert trajs and {t["tool_format"] for t in trajs} == {"native"}
    from transformers import AutoTokenizer

    from inhabit.orchestrator.quickstart.bootstrap import native_system_text

    (folder,) = (run_dir / "cache").glob("model-*")
    tok = AutoTokenizer.from_pretrained(str(folder), local_files_only=True)
    for t in trajs:
        system = t["segments"][0]["messages"][0]
        assert (system["role"], system["content"]) == ("system", NATIVE_SYSTEM)
        prompt = t["segments"][0]["turns"][0]["prompt_token_ids"]
        # <|bos|><|system|>, the whole system turn (instructions + tools block) as one token, <|end|>
        assert tok.decode(prompt[2:3]) == native_system_text(tok) and tok.decode(prompt[3:4]) == "<|end|>"
