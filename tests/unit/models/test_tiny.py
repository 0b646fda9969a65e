"""Tiny model presets: sizes, determinism, validation, and ordinary Hugging Face folders."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError

from inhabit.errors import ConfigError, ModelLoadError
from inhabit.models.tiny import (
    PRESETS,
    TinyModelSpec,
    build_tiny_model,
    count_parameters,
    count_spec_parameters,
    resolve_spec,
    save_model_folder,
)

# Parameter ranges each preset promises (vocab 4096, tied embeddings).
EXPECTED_TOTAL = {
    "dense-1m": (0.7e6, 1.3e6),
    "dense-5m": (4e6, 6e6),
    "dense-30m": (25e6, 35e6),
    "dense-100m": (90e6, 110e6),
    "moe-2m": (1.5e6, 2.5e6),
    "moe-37m": (33e6, 41e6),
}


@pytest.mark.parametrize("name", list(PRESETS))
def test_preset_sizes(name: str) -> None:
    spec = PRESETS[name]
    counts = count_spec_parameters(name)
    lo, hi = EXPECTED_TOTAL[name]
    assert lo <= counts.total <= hi, counts
    if spec.arch == "moe":
        assert counts.active < counts.total
        # Each MoE layer touches top_k of num_experts experts per token.
        expert = 3 * spec.hidden_size * spec.moe_intermediate_size
        skipped = spec.num_layers * (spec.num_experts - spec.num_experts_per_tok) * expert
        assert counts.total - counts.active == skipped
    else:
        assert counts.active == counts.total


def test_meta_count_equals_a_real_build() -> None:
    assert count_spec_parameters("moe-2m") == count_parameters(build_tiny_model("moe-2m"))


def test_build_is_deterministic_per_seed_and_leaves_global_rng() -> None:
    torch.manual_seed(123)
    before = torch.rand(3)
    torch.manual_seed(123)
    a = build_tiny_model("moe-2m", seed=7)
    after = torch.rand(3)
    assert torch.equal(before, after), "building must not consume the caller's RNG"
    b = build_tiny_model("moe-2m", seed=7)
    c = build_tiny_model("moe-2m", seed=8)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)
    assert all(p.dtype == torch.float32 for p in a.parameters())
    assert not a.training


def test_vocab_override_and_arches() -> None:
    dense = build_tiny_model("dense-1m", vocab_size=300)
    assert dense.config.vocab_size == 300 and dense.config.model_type == "qwen3"
    assert dense.get_input_embeddings().weight.shape[0] == 300
    moe = build_tiny_model(TinyModelSpec(arch="moe", num_experts=4, num_experts_per_tok=1))
    assert moe.config.model_type == "qwen3_moe" and moe.config.num_experts == 4


@pytest.mark.parametrize(
    "bad",
    [
        {"hidden_size": 130, "num_heads": 4},
        {"num_heads": 4, "num_kv_heads": 3},
        {"arch": "moe", "num_experts": 2, "num_experts_per_tok": 3},
        {"arch": "sparse"},
        {"hiden_size": 64},
    ],
)
def test_spec_rejects_bad_shapes(bad: dict) -> None:
    with pytest.raises(ValidationError):
        TinyModelSpec(**bad)


def test_unknown_preset_names_the_choices() -> None:
    with pytest.raises(ConfigError, match="moe-2m"):
        resolve_spec("moe-3m")


def test_saved_folder_loads_with_plain_transformers(tiny_moe_dir, default_tok) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    names = {p.name for p in tiny_moe_dir.iterdir()}
    assert {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= names
    cfg = json.loads((tiny_moe_dir / "config.json").read_text())
    assert cfg["architectures"] == ["Qwen3MoeForCausalLM"]
    assert cfg["eos_token_id"][0] == default_tok.eos_token_id
    model = AutoModelForCausalLM.from_pretrained(tiny_moe_dir, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(tiny_moe_dir, local_files_only=True)
    assert tok.chat_template == default_tok.chat_template
    original = build_tiny_model("moe-2m", vocab_size=len(default_tok), seed=0)
    ids = torch.tensor([[1, 4, 300, 301, 302, 6]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, original(ids).logits)


def test_save_refuses_a_tokenizer_bigger_than_the_vocab(tmp_path, default_tok) -> None:
    model = build_tiny_model("dense-1m", vocab_size=1000)
    with pytest.raises(ModelLoadError, match="vocab_size=len"):
        save_model_folder(model, default_tok, tmp_path / "m")
