"""inference/lean_decode.py against the model's own forward: the same tokens, logprobs and routes, bit for bit."""

from __future__ import annotations

import pytest
import torch

from inhabit.inference import lean_decode
from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.inference.kv_cache import SlotKVCache


@pytest.fixture(autouse=True)
def one_thread():
    """Bit-for-bit needs one reduction order. With two threads oneDNN splits a matmul's work by its
    shape, and the lean path's fused projections have other shapes than the stock ones, so on some
    CPUs (an AVX-512 Xeon here) the two paths differ in the last bit of a logprob. One thread
    compares the arithmetic itself."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _reqs(prompts):
    # Staggered lengths: rows retire at different steps, so slots move and rows have unequal lengths.
    return [
        GenerationRequest(p, SamplingParams(seed=i, max_tokens=6 + 5 * i, temperature=0.9), request_id=str(i))
        for i, p in enumerate(prompts)
    ]


async def _run(model, tokenizer, prompts, lean: bool):
    engine = EmbeddedEngine(model, tokenizer, EngineConfig(stop_at_eos=False, lean_decode=lean))
    assert (engine._lean is not None) == lean
    try:
        return await engine.generate(_reqs(prompts))
    finally:
        await engine.close()


@pytest.mark.parametrize("which", ["dense_model", "moe_model"])
async def test_lean_decode_equals_stock_forward(which, request, tokenizer, prompts):
    model = request.getfixturevalue(which)
    assert lean_decode.supports(model)
    lean = await _run(model, tokenizer, prompts, lean=True)
    stock = await _run(model, tokenizer, prompts, lean=False)
    for a, b in zip(lean, stock, strict=True):
        assert a.token_ids == b.token_ids
        assert a.logprobs == b.logprobs  # exact, not approximately
        assert a.routed_experts == b.routed_experts
        if which == "moe_model":
            assert a.routed_experts is not None


def assert_one_decode_step_equal(model, lean: lean_decode.LeanDecode | None = None) -> None:
    """One decode step over rows of different lengths through LeanDecode (`lean`, or one built
    now) and through `model(...)` over the engine's DecodeCache: logits and cache writes identical."""
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    dtype = model.dtype
    lean = lean or lean_decode.LeanDecode(model)

    def cache():
        kv = SlotKVCache(cfg.num_hidden_layers, cfg.num_key_value_heads, head_dim, 4, 64, dtype=dtype)
        kv.resize(4, 64)  # the cache holds only running rows: make room for four
        for layer in range(cfg.num_hidden_layers):
            kv.keys[layer].copy_(torch.randn_like(kv.keys[layer]))
            kv.values[layer].copy_(torch.randn_like(kv.values[layer]))
        kv.lengths[:3] = [5, 17, 9]
        return kv

    ids = torch.tensor([[7], [300], [42]])
    with torch.inference_mode():
        torch.manual_seed(1)
        a = cache()
        rows, pos, kv_len = a.decode_rows(3)
        got = lean.forward(ids, rows, pos, a.decode_mask(pos, kv_len, dtype, "cpu"), kv_len, a.keys, a.values)
        torch.manual_seed(1)
        b = cache()
        db = b.decode_cache(3)
        out = model(
            input_ids=ids,
            attention_mask=db.attention_mask(dtype, "cpu"),
            position_ids=db.positions[:, None],
            past_key_values=db,
            use_cache=True,
        )
    assert torch.equal(got, out.logits[:, -1])
    for layer in range(cfg.num_hidden_layers):
        assert torch.equal(a.keys[layer], b.keys[layer]) and torch.equal(a.values[layer], b.values[layer])


@pytest.mark.parametrize(("swap", "kv_heads"), [(False, 2), (True, 2), (False, 4)])
def test_lean_logits_equal_stock_logits_on_one_step(tokenizer, swap, kv_heads):
    """One decode step over rows of different lengths: logits and cache writes are identical; after
    a weight swap (in place, as the engine's) the fused projections follow the new weights."""
    from inhabit.inference.weights_io import copy_into
    from inhabit.models.tiny import TinyModelSpec, build_tiny_model

    # kv_heads 4 = num_heads: plain multi-head attention (no GQA packing of the query).
    spec = TinyModelSpec(
        arch="dense", hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=kv_heads, intermediate_size=384
    )
    dense_model = build_tiny_model(spec, vocab_size=len(tokenizer), seed=0)
    lean = lean_decode.LeanDecode(dense_model)
    if swap:
        other = build_tiny_model("dense-1m", vocab_size=len(tokenizer), seed=5)
        with torch.no_grad():
            copy_into(dense_model, other.state_dict())
    assert_one_decode_step_equal(dense_model, lean)
