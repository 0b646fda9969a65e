"""A `model.path` folder in a config with bootstrap steps: the policy as it is, unless
`model.bootstrap.from_path` asks for the folder to be bootstrapped."""

from __future__ import annotations

from pathlib import Path

import pytest

from inhabit.config import load_config
from inhabit.errors import ConfigError
from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.prepare import build_start_model, prepare
from inhabit.sandbox import create_provider

CONFIGS = Path(__file__).resolve().parents[3] / "configs"


def _multistep(tmp_path, *overrides: str) -> RunConfig:
    """configs/multistep.toml (250 bootstrap steps) on a handful of generated tasks."""
    return load_config(
        RunConfig,
        CONFIGS / "multistep.toml",
        [f"run_dir={tmp_path / 'run'}", "tasks.count=6", "tasks.held_out=2", *overrides],
    )


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """A saved tiny model folder of the multistep config's shape (as a finished run leaves one)."""
    from inhabit.models.tiny import save_model_folder

    cfg = load_config(RunConfig, CONFIGS / "multistep.toml")
    model, tok = build_start_model(cfg.model)
    return save_model_folder(model, tok, tmp_path_factory.mktemp("model") / "m")


def test_a_folder_is_the_policy_even_with_bootstrap_steps(tmp_path, folder):
    cfg = _multistep(tmp_path, f'model={{path="{folder}"}}', "model.bootstrap.steps=250")
    assert cfg.model.bootstrap.steps == 250 and not cfg.model.bootstraps
    prepared = prepare(cfg, create_provider(cfg.sandbox))
    assert prepared.model_dir == folder  # no expert, no bootstrap, no copy in the cache
    assert not list((tmp_path / "run" / "cache").glob("model-*"))
    assert len(prepared.train) == 4 and len(prepared.held_out) == 2


def test_from_path_asks_for_the_bootstrap_of_the_folder(tmp_path, folder):
    cfg = _multistep(tmp_path, f'model={{path="{folder}"}}', "model.bootstrap.steps=250",
                     "model.bootstrap.from_path=true")  # fmt: skip
    assert cfg.model.bootstraps
    off = _multistep(tmp_path, f'model={{path="{folder}"}}', "model.bootstrap.from_path=true")
    assert not off.model.bootstraps  # no steps: nothing to bootstrap
    assert _multistep(tmp_path).model.bootstraps  # a built model bootstraps as before


def test_from_path_without_a_folder_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="from_path"):
        _multistep(tmp_path, "model.bootstrap.from_path=true")


def test_the_bootstrap_keeps_the_trainers_memory_settings(tmp_path, folder):
    # A real model's multistep bootstrap took 19 GB: whole batches of 4k-token transcripts, layers
    # not recomputed. It now runs in the trainer's micro-batches with its activation checkpointing,
    # the same update (the losses equal those of whole batches), and leaves the model as it found it.
    losses = {}
    for name, extra in (("whole", []), ("micro", ["trainer.micro_batch_tokens=64",
                                                  "trainer.activation_checkpointing=true"])):  # fmt: skip
        cfg = _multistep(
            tmp_path / name, f'model={{path="{folder}"}}', "model.bootstrap.steps=3",
            "model.bootstrap.from_path=true", "model.bootstrap.batch_size=4", *extra,
        )  # fmt: skip
        said: list[str] = []
        prepared = prepare(cfg, create_provider(cfg.sandbox), said.append)
        losses[name] = [line for line in said if line.startswith("bootstrap step")]
        memory = prepared.info["bootstrap_memory"]
        assert memory["activation_checkpointing"] is (name == "micro"), memory
        assert memory["micro_batch_tokens"] == cfg.trainer.micro_batch_tokens
    assert losses["whole"] and len(losses["whole"]) == len(losses["micro"])
    for a, b in zip(losses["whole"], losses["micro"], strict=True):
        assert a.split(":")[0] == b.split(":")[0]
        assert float(a.rsplit(" ", 1)[1]) == pytest.approx(float(b.rsplit(" ", 1)[1]), rel=1e-3)
