"""Exact resume: N steps straight == K steps, save, a NEW trainer loads, N-K steps (bit for bit, CPU)."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch

from inhabit.trainer.checkpoint import CheckpointError, checkpoint_name, latest_checkpoint
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.trainer import Trainer

from .conftest import build
from .test_trainer import synthetic_samples

N, K = 4, 2
CFG = TrainerConfig(lr=1e-3, schedule="cosine", warmup_steps=1, total_steps=N, weight_decay=0.01, seed=3)


def data(step: int, moe: bool) -> list:
    """A step's batch, drawn from the GLOBAL RNGs (torch, random, numpy), as a data loader might:
    resume is only exact if those states are restored too."""
    seed = int(torch.randint(0, 2**31, ()).item()) + random.randrange(1000) + int(np.random.randint(1000))
    return synthetic_samples(5, seed=seed + step, routes_shape=(2, 2, 8) if moe else None)


def run(trainer: Trainer, start: int, stop: int, moe: bool) -> None:
    for step in range(start, stop):
        trainer.train_step(data(step, moe))
        trainer.data_state = {"next_step": step + 1}


def assert_same(a: Trainer, b: Trainer) -> None:
    assert a.version == b.version and a.steps == b.steps and a.data_state == b.data_state
    for (name, p), (_, q) in zip(a.model.named_parameters(), b.model.named_parameters(), strict=True):
        assert torch.equal(p, q), f"parameter {name} differs"
    sa, sb = a.optimizer.state_dict(), b.optimizer.state_dict()
    assert sa["param_groups"] == sb["param_groups"]
    for i, st in sa["state"].items():
        for key, value in st.items():
            assert torch.equal(value, sb["state"][i][key]), f"optimizer state {i}.{key} differs"
    assert a.scheduler.state_dict() == b.scheduler.state_dict()


@pytest.mark.parametrize("preset", ["dense-1m", "moe-2m"])
def test_resume_is_bit_exact(tmp_path, preset) -> None:
    moe = preset.startswith("moe")
    straight = Trainer(build(preset), CFG)
    run(straight, 0, N, moe)
    rng_after_straight = (torch.get_rng_state(), random.getstate(), np.random.get_state()[1].copy())

    first = Trainer(build(preset), CFG)
    run(first, 0, K, moe)
    path = first.save(tmp_path / checkpoint_name(first.version))
    del first
    torch.manual_seed(12345)  # whatever happens in between must not matter
    random.seed(1)
    np.random.seed(1)
    resumed = Trainer(build(preset, seed=99), CFG).load(path)  # other init: everything must come from disk
    assert resumed.version == K and resumed.data_state == {"next_step": K}
    run(resumed, resumed.data_state["next_step"], N, moe)

    assert_same(straight, resumed)
    assert torch.equal(torch.get_rng_state(), rng_after_straight[0])
    assert random.getstate() == rng_after_straight[1]
    assert np.array_equal(np.random.get_state()[1], rng_after_straight[2])


def test_checkpoint_is_a_servable_model_folder(tmp_path) -> None:
    from transformers import AutoModelForCausalLM

    trainer = Trainer(build("moe-2m"), TrainerConfig())
    path = trainer.save(tmp_path / "ckpt")
    loaded = AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, trainer.model.state_dict()[name]), name
    assert {"model.safetensors", "optimizer.pt", "rng.pt", "trainer_state.json"} <= {
        p.name for p in path.iterdir()
    }
    state = json.loads((path / "trainer_state.json").read_text())
    assert state["version"] == 0 and state["config"]["lr"] == trainer.config.lr


def test_save_replaces_atomically_and_incomplete_folders_are_refused(tmp_path) -> None:
    trainer = Trainer(build("dense-1m"), TrainerConfig(lr=1e-3))
    root = tmp_path / "ckpts"
    trainer.save(root / checkpoint_name(0))
    trainer.train_step(synthetic_samples(3, seed=0))
    trainer.save(root / checkpoint_name(1))
    trainer.data_state = {"epoch": 2}
    trainer.save(root / checkpoint_name(1))  # overwrite in place
    assert sorted(p.name for p in root.iterdir()) == ["v000000", "v000001"], "no tmp/old leftovers"
    assert json.loads((root / "v000001" / "trainer_state.json").read_text())["data_state"] == {"epoch": 2}

    (root / "v000005").mkdir()  # a crash before the state file: not a checkpoint
    (root / "v000005" / "model.safetensors").write_bytes(b"partial")
    assert latest_checkpoint(root) == root / "v000001"
    assert latest_checkpoint(tmp_path / "nothing") is None
    with pytest.raises(CheckpointError, match="not a complete checkpoint"):
        Trainer(build("dense-1m"), TrainerConfig()).load(root / "v000005")
    with pytest.raises(CheckpointError, match="do not fit"):
        Trainer(build("moe-2m"), TrainerConfig()).load(root / "v000001")
    trainer.data_state = {"bad": object()}
    with pytest.raises(CheckpointError, match="JSON"):
        trainer.save(root / checkpoint_name(1))
    assert json.loads((root / "v000001" / "trainer_state.json").read_text())["data_state"] == {"epoch": 2}


def test_export_and_from_pretrained_round_trip_with_the_tokenizer(tmp_path) -> None:
    from inhabit.models.tiny import build_tiny_model
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer(cache_dir=tmp_path / "cache")
    trainer = Trainer(
        build_tiny_model("dense-1m", vocab_size=len(tok), seed=0), TrainerConfig(), tokenizer=tok
    )
    path = trainer.save(tmp_path / checkpoint_name(0))
    again = Trainer.from_pretrained(path, TrainerConfig(), version=0).load(path)
    assert again.tokenizer is not None and len(again.tokenizer) == len(tok)
    for name, p in trainer.model.named_parameters():
        assert torch.equal(p, dict(again.model.named_parameters())[name]), name
