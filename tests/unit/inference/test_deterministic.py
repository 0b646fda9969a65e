"""engine.deterministic: a request's tokens and logprobs depend on nothing but its own prompt,
sampling parameters, seed and weights.

A seeded loop (a property test with a fixed seed, so CI is reproducible): one target request is
decoded alone, then again among 2..64 random neighbours (greedy and sampled, short and long
prompts, arriving before it or with it), with other prefill chunk sizes, and with its prefix
coming from the KV cache instead of a prefill. Everything must be bitwise equal: token ids,
logprobs, MoE routes. Tiny models from configs (vocabulary 512), fp32 and bf16, dense and MoE.
"""

from __future__ import annotations

import asyncio
import random
import zlib

import pytest

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import Completion, GenerationRequest, SamplingParams
from inhabit.models.tiny import build_tiny_model

VOCAB = 512


def _random_request(rng: random.Random, rid: str) -> GenerationRequest:
    return GenerationRequest(
        [rng.randrange(VOCAB) for _ in range(rng.randrange(1, 100))],
        SamplingParams(
            temperature=rng.choice([0.0, 0.7, 1.0]),
            max_tokens=rng.randrange(1, 16),
            seed=rng.randrange(10**6),
        ),
        rid,
    )


def _run(model, config: EngineConfig, target: GenerationRequest, neighbours, target_late: bool) -> Completion:
    async def go() -> Completion:
        engine = EmbeddedEngine(model, None, config)
        try:
            early = asyncio.ensure_future(engine.generate(neighbours)) if neighbours else None
            if target_late:
                await asyncio.sleep(0.02)  # the neighbours are mid-decode when the target arrives
            out = (await engine.generate([target]))[0]
            if early is not None:
                await early
            return out
        finally:
            await engine.close()

    return asyncio.run(go())


def _same(a: Completion, b: Completion) -> None:
    assert a.token_ids == b.token_ids
    assert a.logprobs == b.logprobs  # bitwise: float equality of every logprob
    assert a.routed_experts == b.routed_experts
    assert a.prompt_routed_experts == b.prompt_routed_experts


@pytest.mark.parametrize(
    ("preset", "dtype", "trials"),
    [
        ("dense-1m", "float32", 4),
        ("moe-2m", "float32", 4),
        ("dense-1m", "bfloat16", 2),
        ("moe-2m", "bfloat16", 2),
    ],
)
def test_a_request_is_independent_of_its_batch(preset: str, dtype: str, trials: int) -> None:
    model = build_tiny_model(preset, vocab_size=VOCAB, seed=0)
    rng = random.Random(zlib.crc32(f"{preset}-{dtype}".encode()))
    target = GenerationRequest(
        [rng.randrange(VOCAB) for _ in range(90)],
        SamplingParams(temperature=1.0, max_tokens=20, seed=7),
        "target",
    )
    base = EngineConfig(deterministic=True, dtype=dtype, stop_at_eos=False)
    alone = _run(model, base, target, [], False)
    assert len(alone.token_ids) == 20
    sizes = [2, 64] + [rng.randrange(2, 65) for _ in range(trials - 2)]
    for trial, n in enumerate(sizes):
        neighbours = [_random_request(rng, f"n{i}") for i in range(n)]
        config = base.model_copy(update={"prefill_token_budget": rng.choice([16, 37, 4096])})
        _same(_run(model, config, target, neighbours, target_late=trial % 2 == 1), alone)


@pytest.mark.parametrize("preset", ["dense-1m", "moe-2m"])
def test_a_cached_prefix_gives_what_a_prefill_gives(preset: str) -> None:
    """Decode steps reuse cached keys; a new request whose prompt is prompt+completion[:k] prefills
    them instead. Both must give the same logprobs for the rest (greedy: same tokens too)."""
    model = build_tiny_model(preset, vocab_size=VOCAB, seed=0)
    config = EngineConfig(deterministic=True, stop_at_eos=False, prefill_token_budget=24)
    prompt = list(range(5, 70))
    full = _run(
        model, config, GenerationRequest(prompt, SamplingParams(temperature=0.0, max_tokens=16)), [], False
    )
    for k in (1, 7, 15):
        req = GenerationRequest(
            prompt + full.token_ids[:k], SamplingParams(temperature=0.0, max_tokens=16 - k)
        )
        rest = _run(model, config, req, [], False)
        assert rest.token_ids == full.token_ids[k:]
        assert rest.logprobs == full.logprobs[k:]
        if full.routed_experts is not None:
            assert rest.routed_experts == full.routed_experts[k:]


def test_deterministic_mode_stays_close_to_the_standard_forward() -> None:
    """The invariant kernels compute the same function (rounding aside) as the model's own forward."""
    from inhabit.inference.mismatch import measure_mismatch

    model = build_tiny_model("moe-2m", vocab_size=VOCAB, seed=0)
    rng = random.Random(1)
    reqs = [_random_request(rng, f"r{i}") for i in range(3)]
    reqs = [
        GenerationRequest(r.prompt_token_ids, SamplingParams(temperature=1.0, max_tokens=8, seed=i))
        for i, r in enumerate(reqs)
    ]

    async def go():
        engine = EmbeddedEngine(model, None, EngineConfig(deterministic=True, stop_at_eos=False))
        try:
            return await engine.generate(reqs)
        finally:
            await engine.close()

    report = measure_mismatch(model, asyncio.run(go()))
    assert report.max_abs_diff < 1e-4 and report.routing_disagreement == 0.0


def test_deterministic_mode_refuses_other_architectures() -> None:
    from transformers import LlamaConfig, LlamaForCausalLM

    from inhabit.errors import ConfigError

    tiny = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    )
    with pytest.raises(ConfigError, match="deterministic"):
        EmbeddedEngine(tiny, None, EngineConfig(deterministic=True))


def test_vllm_batch_invariant_sets_vllms_switch(monkeypatch) -> None:
    """`VLLMConfig.batch_invariant` puts VLLM_BATCH_INVARIANT=1 in the server's environment (the
    GPU run itself: tests/integration/test_vllm_cpu.py, marked gpu)."""
    from inhabit.inference.vllm_backend import VLLMConfig, VLLMServer

    monkeypatch.delenv("VLLM_BATCH_INVARIANT", raising=False)
    assert (
        VLLMServer(VLLMConfig(model="m", batch_invariant=True)).environment()["VLLM_BATCH_INVARIANT"] == "1"
    )
    assert "VLLM_BATCH_INVARIANT" not in VLLMServer(VLLMConfig(model="m")).environment()
