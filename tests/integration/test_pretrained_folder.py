"""`model.path`: training a model folder of another family, through its own chat template.

The test writes a tiny random Llama folder the way a Llama 3 release looks: its own special tokens
(`<|begin_of_text|>`, `<|start_header_id|>`, `<|end_header_id|>`, `<|eot_id|>`), `<|eot_id|>` as
the end of a turn (config eos), and no template (a base model). A run on it stops in one line
naming `model.chat_template`; with a Llama 3 style template file it trains, every prompt is the
template's rendering, and the checkpoint is a folder that carries the template.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inhabit.cli import app

SRC = Path(__file__).resolve().parents[2] / "src"
SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
LLAMA3_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "<|start_header_id|>{{ m['role'] }}<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>"
    "{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"
)

CONFIG = """
mode = "sync"
steps = 1
seed = 0
run_dir = "{run_dir}"
threads = 1
[model]
path = "{folder}"
{template}
[tasks]
source = "quickstart"
count = 4
held_out = 1
[harness]
max_turns = 2
[engine]
max_model_len = 2048
seed = 0
[rollout]
group_size = 2
tasks_per_step = 1
concurrency = 4
max_tokens = 8
train_zero_advantage = true
[eval]
before = false
after = false
[metrics]
tensorboard = false
progress = "plain"
"""


@pytest.fixture(scope="module")
def llama_folder(tmp_path_factory) -> Path:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    tok.add_special_tokens({"additional_special_tokens": SPECIALS})
    tok.bos_token, tok.eos_token = "<|begin_of_text|>", "<|eot_id|>"
    tok.chat_template = None
    eot = tok.convert_tokens_to_ids("<|eot_id|>")
    config = LlamaConfig(
        vocab_size=(len(tok) + 63) // 64 * 64, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=2048,
        bos_token_id=tok.bos_token_id, eos_token_id=eot, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("llama") / "tiny-llama"
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    for f in ("chat_template.jinja", "chat_template.json"):
        (folder / f).unlink(missing_ok=True)
    cfg = json.loads((folder / "tokenizer_config.json").read_text())
    cfg.pop("chat_template", None)
    (folder / "tokenizer_config.json").write_text(json.dumps(cfg))
    return folder


def test_a_folder_without_chat_template_is_one_clear_line(tmp_path, llama_folder):
    path = tmp_path / "run.toml"
    path.write_text(CONFIG.format(run_dir=tmp_path / "run", folder=llama_folder, template=""))
    proc = subprocess.run(
        [sys.executable, "-m", "inhabit", "train", str(path)],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.strip() and " INFO " not in line]
    assert len(errors) == 1 and "model.chat_template" in errors[0], proc.stderr


def test_a_llama_folder_trains_through_its_own_template(tmp_path, llama_folder):
    from inhabit.models.loading import load_tokenizer

    template = tmp_path / "llama3.jinja"
    template.write_text(LLAMA3_TEMPLATE)
    run_dir = tmp_path / "run"
    path = tmp_path / "run.toml"
    path.write_text(
        CONFIG.format(run_dir=run_dir, folder=llama_folder, template=f'chat_template = "{template}"')
    )
    result = CliRunner().invoke(app, ["train", str(path)])
    assert result.exit_code == 0, result.output

    tok = load_tokenizer(llama_folder)
    header = tok.encode("<|start_header_id|>assistant<|end_header_id|>\n\n", add_special_tokens=False)
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    turns = [turn for t in trajs for s in t["segments"] for turn in s["turns"]]
    assert turns
    for turn in turns:
        prompt = turn["prompt_token_ids"]
        assert prompt[0] == tok.bos_token_id and prompt[-len(header) :] == header
        text = tok.decode(prompt)
        assert "<|start_header_id|>system<|end_header_id|>" in text and "<|eot_id|>" in text
    ckpt = sorted((run_dir / "checkpoints").iterdir())[-1]
    assert load_tokenizer(ckpt).chat_template == LLAMA3_TEMPLATE  # the checkpoint is servable as is
    assert json.loads((ckpt / "config.json").read_text())["model_type"] == "llama"
