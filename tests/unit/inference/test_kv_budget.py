"""KV memory of the embedded engine: sized to the tokens in flight, held under `engine.kv_cache_gb`,
and reused across an episode's turns (kv_cache.py, embedded.py). Tiny dense model, fp32, CPU.

dense-1m has 2 layers x 2 kv heads x head_dim 32: one position of one row costs 2 x 2 x 2 x 32 x 4
= 1,024 bytes of keys and values, and a page (256 positions) 256 KiB."""

from __future__ import annotations

import asyncio

import pytest
import torch

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.inference.errors import InvalidRequest
from inhabit.inference.kv_cache import PAGE_TOKENS, PrefixCache, PrefixEntry, SlotKVCache

TOKEN_BYTES = 1024
PAGE = PAGE_TOKENS * TOKEN_BYTES
# Cold and cached paths compute the same positions in different batch shapes (a decode step per
# token vs one prefill forward), so fp32 results differ in the last bits: the tolerance of the
# engine's other cold-vs-recomputed comparisons (test_embedded.py, mismatch < 1e-4).
TOLERANCE = 1e-4


def _gb(n_bytes: float) -> float:
    return n_bytes / 2**30


def _kv_tensor_bytes(engine: EmbeddedEngine) -> int:
    return sum(t.numel() * t.element_size() for t in (*engine._kv.keys, *engine._kv.values))


def _req(prompt, i, max_tokens, **kw):
    return GenerationRequest(prompt, SamplingParams(seed=i, max_tokens=max_tokens, **kw), request_id=f"r{i}")


async def _bytes_while_running(engine: EmbeddedEngine, prompts: list[list[int]]) -> int:
    """Bytes of the KV tensors once all of `prompts` decode together (then they are cancelled)."""
    handles = engine.open_streams([_req(p, i, 10_000) for i, p in enumerate(prompts)])
    start = engine.steps
    while engine.num_running < len(prompts) or engine.steps < start + 3:
        await asyncio.sleep(0.002)
    held = _kv_tensor_bytes(engine)
    for h in handles:
        h.cancel()
    while engine.num_running:
        await asyncio.sleep(0.002)
    return held


async def test_kv_memory_grows_with_the_tokens_in_flight(dense_model, tokenizer):
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False, prefix_cache=False))
    assert engine._kv.token_bytes == TOKEN_BYTES
    try:
        assert _kv_tensor_bytes(engine) == 0  # nothing allocated before a request runs
        one = await _bytes_while_running(engine, [[5] * 20])
        four = await _bytes_while_running(engine, [[5 + i] * 20 for i in range(4)])
        long = await _bytes_while_running(engine, [[7] * 600])  # 600 positions: three pages
    finally:
        await engine.close()
    assert one == PAGE
    assert four == 4 * PAGE
    assert long == 3 * PAGE
    # Not the engine's 64 slots x the context (4,096 positions): 256 MiB for this model.
    assert max(one, four, long) < 64 * 4096 * TOKEN_BYTES / 100
    assert engine.stats()["peak_kv_bytes"] == 4 * PAGE


async def test_a_budget_smaller_than_the_demand_makes_requests_wait(dense_model, tokenizer):
    """Six requests of one page each under a budget of 2.5 pages: two run at a time, all complete,
    with the tokens and logprobs of an engine without a budget."""
    prompts = [[11 + i] * 30 for i in range(6)]
    budget = 2.5 * PAGE
    tight = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False, kv_cache_gb=_gb(budget)))
    free = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False))
    try:
        reqs = [_req(p, i, 40, temperature=0.9) for i, p in enumerate(prompts)]
        running_seen: list[int] = []
        task = asyncio.create_task(tight.generate(reqs))
        while not task.done():
            running_seen.append(tight.num_running)
            await asyncio.sleep(0.001)
        got = await task
        want = await free.generate(reqs)
    finally:
        await tight.close()
        await free.close()
    assert max(running_seen) == 2
    assert tight.stats()["peak_kv_bytes"] <= budget
    assert all(len(o.token_ids) == 40 and o.finish_reason == "length" for o in got)
    for a, b in zip(got, want, strict=True):
        assert a.token_ids == b.token_ids
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < TOLERANCE


@pytest.mark.parametrize("deterministic", [False, True])
async def test_rows_that_outgrow_the_budget_preempt_the_newest(dense_model, tokenizer, deterministic):
    """Two requests fit at one page each but not at two: the newer one goes back to the queue,
    resumes when the older one is done (its KV recomputed) and ends as it would have (bit for
    bit in deterministic mode)."""
    budget = 2.5 * PAGE
    cfg = EngineConfig(stop_at_eos=False, deterministic=deterministic)
    tight = EmbeddedEngine(dense_model, tokenizer, cfg.model_copy(update={"kv_cache_gb": _gb(budget)}))
    free = EmbeddedEngine(dense_model, tokenizer, cfg)
    try:
        reqs = [_req([21 + i] * 10, i, 300, temperature=0.9) for i in range(2)]
        got = await tight.generate(reqs)
        want = await free.generate(reqs)
    finally:
        await tight.close()
        await free.close()
    assert tight.preemptions >= 1
    assert tight.stats()["peak_kv_bytes"] <= budget
    for a, b in zip(got, want, strict=True):
        assert len(a.token_ids) == 300 and a.token_ids == b.token_ids
        if deterministic:
            assert a.logprobs == b.logprobs
        else:
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < TOLERANCE


async def test_a_request_over_the_budget_alone_is_refused_in_one_line(dense_model, tokenizer):
    engine = EmbeddedEngine(
        dense_model, tokenizer, EngineConfig(stop_at_eos=False, kv_cache_gb=_gb(300 * TOKEN_BYTES))
    )
    try:
        with pytest.raises(InvalidRequest) as err:
            await engine.generate([_req([5] * 400, 0, 4)])
        message = str(err.value)
        assert "\n" not in message and "kv_cache_gb" in message and "400 tokens" in message
        # A prompt that fits stops at the budget's length, like at the context limit.
        (o,) = await engine.generate([_req([5] * 250, 1, 500)])
    finally:
        await engine.close()
    assert o.finish_reason == "length" and 250 + len(o.token_ids) <= 300


async def _two_turns(engine: EmbeddedEngine, tokenizer, first_prompt: list[int]):
    (turn1,) = await engine.generate([_req(first_prompt, 1, 20, temperature=0.9)])
    observation = tokenizer("\nobservation: 3 tests passed\n", add_special_tokens=False)["input_ids"]
    second = first_prompt + turn1.token_ids + observation
    before = engine.stats()
    (turn2,) = await engine.generate([_req(second, 2, 20, temperature=0.9)])
    after = engine.stats()
    cached = after["cached_prompt_tokens"] - before["cached_prompt_tokens"]
    prefilled = after["prefilled_tokens"] - before["prefilled_tokens"]
    return second, turn1, turn2, cached, prefilled


@pytest.mark.parametrize("deterministic", [False, True])
async def test_next_turn_prefills_only_its_new_suffix(dense_model, tokenizer, deterministic):
    first = tokenizer("def add(a, b):\n    " * 8, add_special_tokens=False)["input_ids"]
    assert len(first) >= 40
    cfg = EngineConfig(stop_at_eos=False, deterministic=deterministic)
    warm = EmbeddedEngine(dense_model, tokenizer, cfg)
    cold = EmbeddedEngine(dense_model, tokenizer, cfg.model_copy(update={"prefix_cache": False}))
    try:
        second, turn1, turn2, cached, prefilled = await _two_turns(warm, tokenizer, first)
        (reference,) = await cold.generate([_req(second, 2, 20, temperature=0.9)])
    finally:
        await warm.close()
        await cold.close()
    # The cache holds turn 1's prompt and every completion token but the last (never fed back).
    assert cached == len(first) + len(turn1.token_ids) - 1
    assert prefilled == len(second) - cached
    stats = warm.stats()
    assert stats["prompt_tokens"] == len(first) + len(second)
    assert warm.prefix_hit_share() == pytest.approx(cached / (len(first) + len(second)))
    assert turn2.token_ids == reference.token_ids
    if deterministic:  # the batch-invariant forward: a position's KV is the same however computed
        assert turn2.logprobs == reference.logprobs
    else:
        assert max(abs(x - y) for x, y in zip(turn2.logprobs, reference.logprobs, strict=True)) < TOLERANCE


async def test_prefix_cache_stays_in_the_budget_and_clears_on_swap(dense_model, tokenizer):
    """Ten finished 300-token requests under a 4-page budget: old entries are evicted, the total
    never passes the budget; a weight swap drops every entry (their keys are the old weights')."""
    budget = 4 * PAGE
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False, kv_cache_gb=_gb(budget)))
    try:
        for i in range(10):
            await engine.generate([_req([30 + i] * 290, i, 10)])
        stats = engine.stats()
        assert 1 <= stats["prefix_cache_entries"] < 10
        assert stats["peak_kv_bytes"] <= budget
        await engine.load_weights({k: v.clone() for k, v in dense_model.state_dict().items()}, version=1)
        assert engine.stats()["prefix_cache_entries"] == 0
    finally:
        await engine.close()


def test_prefix_cache_finds_the_longest_common_prefix_and_evicts_oldest():
    def entry(tokens):
        kv = [torch.zeros(1, len(tokens), 2)]
        return PrefixEntry(list(tokens), kv, [t.clone() for t in kv])

    cache = PrefixCache(max_entries=2, min_reuse=3)
    cache.insert(entry(range(10)))
    cache.insert(entry([1, 2, 3, 4, 5]))
    hit = cache.lookup([0, 1, 2, 3, 4, 99, 98])
    assert hit is not None and hit[1] == 5 and hit[0].tokens == list(range(10))
    assert cache.lookup(list(range(10)))[1] == 9  # the prompt's last token is always computed
    assert cache.lookup([0, 1, 9, 9]) is None  # 2 common tokens: under min_reuse
    cache.insert(entry(range(12)))  # extends the first entry, which goes
    assert len(cache) == 2 and cache.lookup([*range(12), 7])[1] == 12
    cache.insert(entry([7, 7, 7, 7]))  # over max_entries: the least recently used ([1..5]) goes
    assert cache.lookup([1, 2, 3, 4, 5, 6]) is None
    assert cache.nbytes == sum(e.nbytes for e in cache._entries.values())


def test_release_copies_rows_out_and_shrinks_to_the_rows_left():
    kv = SlotKVCache(num_layers=2, num_kv_heads=1, head_dim=4, max_slots=8, max_len=4096, page_tokens=16)
    kv.ensure(5, 40)
    for store in (kv.keys, kv.values):
        for buf in store:
            buf.copy_(torch.randn_like(buf))
    kv.lengths[:5] = [30, 12, 39, 5, 20]
    before = [[b.clone() for b in store] for store in (kv.keys, kv.values)]
    out = kv.release(5, drop=[4, 1, 3], copy={1: 12, 4: 20})
    assert (kv.rows, kv.capacity) == (2, 48)  # rows 0 and 2 are left; 39 + 1 positions round to 48
    assert kv.lengths[:3] == [30, 39, 0]
    for side, store in enumerate((kv.keys, kv.values)):
        for layer, buf in enumerate(store):
            old = before[side][layer]
            assert buf.shape == (2, 1, 48, 4)
            assert torch.equal(buf[0], old[0, :, :48]) and torch.equal(buf[1], old[2, :, :48])
            assert torch.equal(out[1][side][layer], old[1, :, :12])
            assert torch.equal(out[4][side][layer], old[4, :, :20])
    assert set(out) == {1, 4}
    assert kv.release(2, drop=[0, 1], copy={}) == {} and kv.nbytes == 0


async def test_a_batch_finishing_together_never_holds_its_kv_twice(dense_model, tokenizer):
    """Four 300-token requests that finish in the same step: their KV moves to the prefix cache as the
    slot buffers are freed, so the KV held peaks at the running rows' buffers (4 rows x 2 pages),
    not at those plus the four cached copies; the cache then serves a next turn."""
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(stop_at_eos=False))
    prompts = [[40 + i] * 290 for i in range(4)]
    try:
        outs = await engine.generate([_req(p, i, 8) for i, p in enumerate(prompts)])
        stats = engine.stats()
        assert stats["prefix_cache_entries"] == 4 and stats["kv_bytes"] == 0 == _kv_tensor_bytes(engine)
        assert stats["prefix_cache_bytes"] == 4 * (290 + 8 - 1) * TOKEN_BYTES
        assert stats["peak_kv_bytes"] == 4 * 2 * PAGE
        (nxt,) = await engine.generate([_req(prompts[2] + outs[2].token_ids + [9, 9], 9, 4)])
        assert engine.stats()["cached_prompt_tokens"] == 290 + 8 - 1
        assert len(nxt.token_ids) == 4
    finally:
        await engine.close()


def test_slot_buffers_shrink_when_rows_leave():
    kv = SlotKVCache(num_layers=1, num_kv_heads=1, head_dim=4, max_slots=8, max_len=4096, page_tokens=16)
    kv.ensure(8, 100)
    assert (kv.rows, kv.capacity) == (8, 112)
    kv.ensure(2, 100)  # four times what two rows need: reallocated to them
    assert (kv.rows, kv.capacity) == (2, 112)
    kv.ensure(2, 20)
    assert (kv.rows, kv.capacity) == (2, 32)
    assert kv.nbytes == 2 * 32 * kv.token_bytes == sum(t.numel() * 4 for t in (*kv.keys, *kv.values))


def test_slot_rows_grow_with_room_to_spare_only_within_the_bytes_allowed():
    kv = SlotKVCache(num_layers=1, num_kv_heads=1, head_dim=4, max_slots=16, max_len=4096, page_tokens=16)
    kv.ensure(4, 16)
    row = 16 * kv.token_bytes  # one row of one page
    kv.ensure(5, 16, max_bytes=100 * row)  # one request joins: six rows, the next one copies nothing
    assert kv.rows == 6
    kv.ensure(6, 16, max_bytes=100 * row)
    assert kv.rows == 6
    kv.ensure(7, 16, max_bytes=7 * row)  # nine would not fit: exactly seven
    assert kv.rows == 7 and kv.nbytes == 7 * row
