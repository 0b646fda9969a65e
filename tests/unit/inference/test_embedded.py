"""The embedded engine against full forwards of the same tiny models (fp32, CPU)."""

from __future__ import annotations

import asyncio

import pytest
import torch

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine, TokenEvent
from inhabit.inference.engine import Completion, GenerationRequest, SamplingParams
from inhabit.inference.errors import EngineClosed, EngineOverloaded, InvalidRequest
from inhabit.inference.mismatch import measure_mismatch


def _reqs(prompts, **kw):
    return [
        GenerationRequest(p, SamplingParams(**{"seed": i, **kw}), request_id=f"r{i}")
        for i, p in enumerate(prompts)
    ]


async def test_logprobs_and_routes_match_full_forward(moe_model, tokenizer, prompts):
    engine = EmbeddedEngine(moe_model, tokenizer, EngineConfig(stop_at_eos=False))
    try:
        outs = await engine.generate(_reqs(prompts, max_tokens=24, temperature=0.8))
    finally:
        await engine.close()
    assert [o.request_id for o in outs] == [f"r{i}" for i in range(len(prompts))]
    for o, p in zip(outs, prompts, strict=True):
        assert o.prompt_token_ids == p and len(o.token_ids) == 24 and o.finish_reason == "length"
        assert len(o.logprobs) == len(o.versions) == len(o.routed_experts) == 24
        assert len(o.prompt_routed_experts) == len(p) - 1
        assert all(len(r) == 2 and all(len(layer) == 2 for layer in r) for r in o.routed_experts)
    report = measure_mismatch(moe_model, outs, temperatures=0.8)
    assert report.tokens == 24 * len(prompts)
    assert report.max_abs_diff < 1e-4
    assert report.routing_disagreement == 0.0
    assert report.replay_max_abs_diff is not None and report.replay_max_abs_diff < 1e-4


async def test_greedy_matches_hf_generate(dense_model, tokenizer, prompts):
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False))
    try:
        outs = await engine.generate(_reqs(prompts, max_tokens=16, temperature=0.0))
    finally:
        await engine.close()
    for o, p in zip(outs, prompts, strict=True):
        ref = dense_model.generate(
            torch.tensor([p]), max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0
        )
        assert o.token_ids == ref[0, len(p) :].tolist()
        # Greedy rows report raw logprobs, each the max of its distribution (all <= 0).
        assert all(lp <= 0 for lp in o.logprobs)


async def test_seeded_sampling_is_reproducible(dense_model, tokenizer, prompts):
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False))
    try:
        a = await engine.generate(_reqs(prompts, max_tokens=12))
        b = await engine.generate(_reqs(prompts, max_tokens=12))
        other = await engine.generate([GenerationRequest(prompts[0], SamplingParams(max_tokens=12, seed=99))])
    finally:
        await engine.close()
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert other[0].token_ids != a[0].token_ids


async def test_requests_join_and_leave_between_steps(dense_model, tokenizer, prompts):
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False, max_batch_size=3))
    try:
        long = asyncio.create_task(engine.generate(_reqs(prompts[:1], max_tokens=60)))
        while engine.steps < 5:
            await asyncio.sleep(0.005)
        short = await engine.generate(_reqs(prompts[1:], max_tokens=4))  # 4 requests, 3 slots
        assert not long.done(), "short requests joined the running batch and finished first"
        (long_out,) = await long
    finally:
        await engine.close()
    assert all(len(o.token_ids) == 4 for o in short)
    assert len(long_out.token_ids) == 60
    # Batched: far fewer decode steps than tokens generated one request at a time.
    assert engine.steps < 60 + 4 * 4


async def test_stop_strings_ids_and_eos(dense_model, tokenizer, prompts):
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False))
    try:
        (free,) = await engine.generate(
            [GenerationRequest(prompts[0], SamplingParams(max_tokens=20, seed=3))]
        )
        stop_tok = free.token_ids[5]
        (by_id,) = await engine.generate(
            [GenerationRequest(prompts[0], SamplingParams(max_tokens=20, seed=3, stop_token_ids=(stop_tok,)))]
        )
        stop_text = tokenizer.decode(free.token_ids[8:10])
        (by_str,) = await engine.generate(
            [GenerationRequest(prompts[0], SamplingParams(max_tokens=20, seed=3, stop=(stop_text,)))]
        )
    finally:
        await engine.close()
    first = free.token_ids.index(stop_tok)
    assert by_id.token_ids == free.token_ids[: first + 1] and by_id.finish_reason == "stop"
    assert by_str.finish_reason == "stop" and stop_text not in by_str.text
    assert free.text.startswith(by_str.text) and len(by_str.token_ids) <= 10
    # With eos stopping on, the model's end-of-turn id ends a request.
    assert engine.eos_ids == {tokenizer.eos_token_id}
    engine2 = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=True))
    try:
        (o,) = await engine2.generate([GenerationRequest(prompts[0], SamplingParams(max_tokens=200, seed=0))])
    finally:
        await engine2.close()
    assert (o.finish_reason == "stop" and o.token_ids[-1] in engine2.eos_ids) or len(o.token_ids) == 200


@pytest.mark.parametrize("mode", ["recompute", "keep"])
async def test_swap_mid_request_records_versions(moe_model, moe_folder_b, tokenizer, prompts, mode):
    engine = EmbeddedEngine(moe_model, tokenizer, EngineConfig(stop_at_eos=False, kv_after_swap=mode))
    final: Completion | None = None
    seen = 0
    try:
        async for ev in engine.stream(GenerationRequest(prompts[0], SamplingParams(max_tokens=40, seed=1))):
            if isinstance(ev, TokenEvent):
                seen += 1
                if seen == 5:
                    await engine.load_weights(moe_folder_b, version=7)
            else:
                final = ev
    finally:
        await engine.close()
    assert final is not None and engine.version == 7 and engine.last_swap_seconds is not None
    v = final.versions
    k = v.index(7)
    assert k >= 5 and v == [0] * k + [7] * (len(v) - k), "the version changes once, between steps"
    if mode == "recompute":
        # Post-swap tokens are exactly what the new weights give for their prefix.
        report = measure_mismatch(moe_model, [final], version=7)
        assert report.skipped_tokens == k and report.tokens == len(v) - k
        assert report.max_abs_diff < 1e-4 and report.routing_disagreement == 0.0


async def test_load_folder_equals_engine_built_on_it(moe_model, moe_folder_b, tokenizer, prompts):
    a = EmbeddedEngine(moe_model, tokenizer, EngineConfig(stop_at_eos=False))
    b = EmbeddedEngine.from_path(moe_folder_b, EngineConfig(stop_at_eos=False))
    try:
        await a.load_weights(moe_folder_b, version=1)
        reqs = _reqs(prompts, max_tokens=10, temperature=0.0)
        got, want = await a.generate(reqs), await b.generate(reqs)
    finally:
        await a.close()
        await b.close()
    assert [o.token_ids for o in got] == [o.token_ids for o in want]
    assert all(o.versions == [1] * 10 for o in got)


async def test_bad_requests_overload_and_close(dense_model, tokenizer, prompts):
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(max_queue=2, max_model_len=64))
    with pytest.raises(InvalidRequest):
        await engine.generate([GenerationRequest([])])
    with pytest.raises(InvalidRequest):
        await engine.generate([GenerationRequest([1] * 64)])
    with pytest.raises(InvalidRequest):
        await engine.generate([GenerationRequest([len(tokenizer) + 10_000])])
    with pytest.raises(EngineOverloaded):
        await engine.generate(_reqs(prompts[:3], max_tokens=4))
    # Context limit: prompt + completion never exceeds max_model_len.
    (o,) = await engine.generate([GenerationRequest([5] * 60, SamplingParams(max_tokens=50, seed=0))])
    assert len(o.token_ids) <= 4
    await engine.close()
    with pytest.raises(EngineClosed):
        await engine.generate(_reqs(prompts[:1]))


async def test_cancelled_request_leaves_the_batch(dense_model, tokenizer, prompts):
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False))
    try:
        task = asyncio.create_task(engine.generate(_reqs(prompts[:1], max_tokens=100_000 // 100)))
        while engine.steps < 3:
            await asyncio.sleep(0.005)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if engine.num_running == 0:
                break
            await asyncio.sleep(0.01)
        assert engine.num_running == 0
        (o,) = await engine.generate(_reqs(prompts[1:2], max_tokens=3))
        assert len(o.token_ids) == 3
    finally:
        await engine.close()


@pytest.mark.parametrize("lean_decode", [True, False])
async def test_the_kv_cache_goes_by_the_keyword_transformers_takes(
    dense_model, tokenizer, prompts, lean_decode
):
    """No deprecation warning for `past_key_values` from prefill or decode (newer transformers name
    the keyword `cache`): the quickstart's output stays clean."""
    import logging
    import warnings

    logging.Logger.warning_once.cache_clear()  # transformers warns once per process
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    hf = logging.getLogger("transformers")
    hf.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            engine = EmbeddedEngine(
                dense_model, tokenizer, EngineConfig(stop_at_eos=False, lean_decode=lean_decode)
            )
            try:
                outs = await engine.generate(_reqs(prompts, max_tokens=4, temperature=0.0))
            finally:
                await engine.close()
    finally:
        hf.removeHandler(handler)
    assert all(len(o.token_ids) == 4 for o in outs)
    said = [r.getMessage() for r in records] + [str(w.message) for w in caught]
    assert [m for m in said if "past_key_values" in m] == []
