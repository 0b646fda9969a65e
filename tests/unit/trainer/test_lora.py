"""LoRA end to end on tiny models: only adapters train; the published merged weights reach the
embedded engine, whose logprobs are the merged model's; checkpoints are servable, hold a peft
adapter, and resume bit for bit."""

from __future__ import annotations

import asyncio
import random

import numpy as np
import pytest
import torch

from inhabit.errors import TrainerError
from inhabit.trainer.checkpoint import CheckpointError, checkpoint_name
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.lora import LoraSettings, lora_layers
from inhabit.trainer.trainer import Trainer

from .conftest import build
from .test_checkpoint import assert_same, run
from .test_trainer import synthetic_samples

LORA = LoraSettings(rank=4, alpha=8.0)
CFG = TrainerConfig(lr=1e-2, seed=3, lora=LORA)


def manual_merge(base: torch.nn.Module, trainer: Trainer) -> torch.nn.Module:
    """`base` with W += (alpha / rank) * B @ A for each adapter of `trainer`, computed here from the
    adapter tensors (not through the code under test)."""
    scale = trainer.config.lora.alpha / trainer.config.lora.rank
    params = dict(base.named_parameters())
    with torch.no_grad():
        for path, layer in lora_layers(trainer.model).items():
            a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
            params[f"{path}.weight"] += scale * (b @ a)
    return base


def test_only_adapters_train() -> None:
    trainer = Trainer(build("dense-1m"), CFG)
    frozen = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if ".lora_" not in n}
    adapters = {n: p.detach().clone() for n, p in trainer.model.named_parameters() if ".lora_" in n}
    assert adapters and all(not trainer.model.get_parameter(n).requires_grad for n in frozen)
    optimized = {id(p) for g in trainer.optimizer.param_groups for p in g["params"]}
    assert optimized == {id(trainer.model.get_parameter(n)) for n in adapters}
    # every linear projection of the decoder is wrapped by default, the LM head is not
    wrapped = {p.rsplit(".", 1)[-1] for p in lora_layers(trainer.model)}
    assert wrapped == {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}
    for step in range(2):
        trainer.train_step(synthetic_samples(4, seed=step))
    for name, before in frozen.items():
        assert torch.equal(trainer.model.get_parameter(name), before), f"{name} moved"
    moved = [n for n, before in adapters.items() if not torch.equal(trainer.model.get_parameter(n), before)]
    assert len(moved) == len(adapters), "every adapter matrix moves (B from zero, then A)"
    # the merged weights differ from the base exactly in the wrapped projections
    merged, base = trainer.state_dict_for_engine(), build("dense-1m").state_dict()
    assert set(merged) == set(base)
    changed = {n for n in base if not torch.equal(merged[n], base[n])}
    assert changed == {f"{p}.weight" for p in lora_layers(trainer.model)}


def test_targets_pick_modules_and_bad_targets_are_one_line() -> None:
    trainer = Trainer(build("dense-1m"), CFG.model_copy(update={"lora": LoraSettings(targets=["q_proj"])}))
    assert {p.rsplit(".", 1)[-1] for p in lora_layers(trainer.model)} == {"q_proj"}
    with pytest.raises(TrainerError, match=r"trainer\.lora\.targets"):
        Trainer(build("dense-1m"), CFG.model_copy(update={"lora": LoraSettings(targets=["nope_proj"])}))
    with pytest.raises(ValueError, match="data_parallel"):
        TrainerConfig(lora={"rank": 4}, data_parallel=2)


def test_published_version_reaches_the_engine_and_its_logprobs_are_the_merged_models(
    tmp_path,
) -> None:
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.engine import GenerationRequest, SamplingParams
    from inhabit.inference.mismatch import measure_mismatch
    from inhabit.models.tiny import build_tiny_model
    from inhabit.models.tokenizer import default_tokenizer
    from inhabit.weights.publish import Publisher, PublisherConfig
    from inhabit.weights.subscribe import Subscriber, SubscriberConfig

    tok = default_tokenizer()

    def model():
        return build_tiny_model("dense-1m", vocab_size=len(tok), seed=0)

    trainer = Trainer(model(), CFG.model_copy(update={"lr": 3e-2}))
    publisher = Publisher(str(tmp_path / "store"), PublisherConfig(dtype="float32"))
    publisher.publish(trainer.state_dict_for_engine(), trainer.version)
    for step in range(2):
        trainer.train_step(synthetic_samples(4, seed=step))
        manifest = publisher.publish(trainer.state_dict_for_engine(), trainer.version)
    assert manifest.kind == "delta" and trainer.version == 2

    async def generate():
        engine = EmbeddedEngine(model(), tok, EngineConfig(stop_at_eos=False))
        try:
            sub = Subscriber(str(tmp_path / "store"), SubscriberConfig(cache_dir=str(tmp_path / "cache")))
            result = await asyncio.to_thread(sub.sync)
            assert result.reached
            await sub.push(engine, result)
            reqs = [GenerationRequest([5, 17, 99, 3], SamplingParams(max_tokens=12, seed=1), request_id="r")]
            return await engine.generate(reqs)
        finally:
            await engine.close()

    outs = asyncio.run(generate())
    assert outs[0].versions == [2] * 12
    merged = manual_merge(model(), trainer)
    assert measure_mismatch(merged, outs).max_abs_diff < 1e-4
    assert measure_mismatch(model(), outs).max_abs_diff > 1e-3, "the update changed nothing"


def test_checkpoint_is_servable_merged_and_holds_a_peft_adapter(tmp_path) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    trainer = Trainer(build("dense-1m"), CFG)
    trainer.train_step(synthetic_samples(4, seed=0))
    path = trainer.save(tmp_path / "ckpt")
    assert (path / "adapter" / "adapter_config.json").is_file()
    expected = manual_merge(build("dense-1m"), trainer).state_dict()
    served = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    for name, tensor in served.state_dict().items():
        assert torch.allclose(tensor, expected[name], atol=1e-6), name
    # the adapter folder is peft's own format: peft merges it into the base model to the same weights
    peft_merged = PeftModel.from_pretrained(build("dense-1m"), path / "adapter").merge_and_unload()
    for name, tensor in peft_merged.state_dict().items():
        assert torch.allclose(tensor, expected[name], atol=1e-6), name
    full = Trainer(build("dense-1m"), TrainerConfig()).save(tmp_path / "full")
    with pytest.raises(CheckpointError, match=r"without trainer\.lora"):
        Trainer(build("dense-1m"), CFG).load(full)


N, K = 4, 2


@pytest.mark.parametrize("rebuild", ["other-init", "from-checkpoint-folder"])
def test_resume_is_bit_exact_with_lora(tmp_path, rebuild) -> None:
    from transformers import AutoModelForCausalLM

    cfg = TrainerConfig(
        lr=1e-2, schedule="cosine", warmup_steps=1, total_steps=N, weight_decay=0.01, seed=3, lora=LORA
    )
    cfg = cfg.model_copy(update={"lora": LORA.model_copy(update={"dropout": 0.1})})  # RNG matters
    straight = Trainer(build("dense-1m"), cfg)
    run(straight, 0, N, False)

    first = Trainer(build("dense-1m"), cfg)
    run(first, 0, K, False)
    path = first.save(tmp_path / checkpoint_name(first.version))
    del first
    torch.manual_seed(12345)
    random.seed(1)
    np.random.seed(1)
    if rebuild == "other-init":
        model = build("dense-1m", seed=99)
    else:  # what a run's --resume does: the model from the checkpoint's (merged) folder
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    resumed = Trainer(model, cfg).load(path)
    run(resumed, resumed.data_state["next_step"], N, False)
    assert_same(straight, resumed)


async def test_vllm_backend_serves_adapters_only_when_started_for_them() -> None:
    """The flags and switch of vLLM's runtime LoRA loading (the real server: test_vllm_cpu.py)."""
    from inhabit.inference.errors import InvalidRequest
    from inhabit.inference.remote import RemoteConfig, RemoteEngine
    from inhabit.inference.vllm_backend import VLLMConfig, VLLMEngine, VLLMServer

    server = VLLMServer(VLLMConfig(model="m", command=["vllm-entry"], lora_rank=16))
    args = server.command()
    assert args[args.index("--max-lora-rank") + 1] == "16" and "--enable-lora" in args
    assert server.environment()["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "1"
    plain = VLLMServer(VLLMConfig(model="m", command=["vllm-entry"]))
    assert "--enable-lora" not in plain.command()
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in plain.environment()
    remote = RemoteEngine(RemoteConfig(base_url="http://127.0.0.1:9", flavor="vllm", model="m"))
    with pytest.raises(InvalidRequest, match="without LoRA"):
        await VLLMEngine(plain, remote).load_adapter("adapter", 1)


def test_the_shipped_lora_example_parses_its_lora_table() -> None:
    from pathlib import Path

    from inhabit.config import load_config
    from inhabit.orchestrator.config import RunConfig

    path = Path(__file__).resolve().parents[3] / "configs" / "examples" / "lora.toml"
    cfg = load_config(RunConfig, path)
    assert cfg.trainer.lora == LoraSettings(rank=16, alpha=32.0, dropout=0.0, targets=None)
    assert load_config(
        RunConfig, path, overrides=["trainer.lora.targets=['q_proj']"]
    ).trainer.lora.targets == ["q_proj"]


def test_lora_under_bf16_autocast_and_with_a_kl_anchor() -> None:
    """bf16-mixed: the adapters stay fp32 and train; the KL anchor's reference is the base model
    (no adapters), so the KL is 0 before the first update and positive after."""
    cfg = CFG.model_copy(update={"precision": "bf16-mixed", "kl_coef": 0.1})
    trainer = Trainer(build("dense-1m"), cfg)
    assert trainer.reference is not None and not lora_layers(trainer.reference)
    b = next(p for n, p in trainer.model.named_parameters() if ".lora_B." in n)
    assert b.dtype == torch.float32 and not b.any()
    first = trainer.train_step(synthetic_samples(4, seed=0))
    second = trainer.train_step(synthetic_samples(4, seed=1))
    assert first.kl_ref == 0.0 and second.kl_ref > 0.0
    assert b.any() and torch.isfinite(torch.tensor(second.loss))
