"""Every shipped TOML under configs/ parses as the config it is for; RunConfig rejects mistakes."""

from __future__ import annotations

from pathlib import Path

import pytest

from inhabit.config import load_config
from inhabit.errors import ConfigError
from inhabit.orchestrator.config import RunConfig

CONFIGS = Path(__file__).resolve().parents[3] / "configs"
RUN_CONFIGS = sorted(p for p in CONFIGS.glob("*.toml") if "[tasks]" in p.read_text())  # `inhabit train` runs


EXAMPLES = sorted(p for p in (CONFIGS / "examples").glob("*.toml") if not p.name.startswith("specialize"))
SPECIALIZE_EXAMPLES = sorted((CONFIGS / "examples").glob("specialize*.toml"))


@pytest.mark.parametrize("path", SPECIALIZE_EXAMPLES, ids=lambda p: p.name)
def test_specialize_examples_parse(path):
    """`inhabit specialize --config` examples: a SpecializeConfig for GPUs with vLLM engines."""
    from inhabit.orchestrator.specialize.config import SpecializeConfig

    cfg = load_config(SpecializeConfig, path)
    assert cfg.engine.backend == "vllm" and cfg.trainer.device == "cuda" and cfg.engine.device == "cuda"


def test_a_specialize_example_ships():
    assert SPECIALIZE_EXAMPLES


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_gpu_and_cluster_examples_parse(path):
    """configs/examples/ are for GPUs and clusters (not run here); they must stay valid configs."""
    cfg = load_config(RunConfig, path)
    assert cfg.model.path is not None and cfg.trainer.device == "cuda"


def test_there_are_shipped_run_configs():
    assert len(EXAMPLES) >= 3
    assert any(p.name == "quickstart.toml" for p in RUN_CONFIGS)


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: p.name)
def test_shipped_run_config_parses(path):
    cfg = load_config(RunConfig, path)
    assert cfg.rollout.group_size >= 1


# Every shipped TOML that is not a run config, with the config class it is for (and the overrides a
# user must add, such as the model folder of `inhabit serve`). A new TOML must be added here.
OTHER_CONFIGS = {
    "harness.toml": ("inhabit.harness.config", "HarnessConfig", []),
    "serve.toml": ("inhabit.inference.config", "ServeConfig", ["model=models/x"]),
    "reward.toml": ("inhabit.rewards.compose", "RewardConfig", []),
    "online.toml": ("inhabit.online.config", "OnlineConfig", []),
    "scale.toml": ("inhabit.orchestrator.scale.config", "ScaleConfig", []),
    "midtrain.toml": ("inhabit.orchestrator.midtrain.config", "MidtrainConfig", []),
}


def test_every_toml_in_configs_is_parsed_by_some_test():
    import importlib

    for path in CONFIGS.glob("*.toml"):
        if path in RUN_CONFIGS:
            continue
        assert path.name in OTHER_CONFIGS, f"{path.name}: add it to OTHER_CONFIGS with its config class"
        module, name, overrides = OTHER_CONFIGS[path.name]
        load_config(getattr(importlib.import_module(module), name), path, overrides)


def test_quickstart_overrides_and_errors():
    q = CONFIGS / "quickstart.toml"
    cfg = load_config(RunConfig, q, ["mode=sync", "steps=3", "max_staleness=0"])
    assert (cfg.mode, cfg.steps, cfg.max_staleness) == ("sync", 3, 0)
    with pytest.raises(ConfigError, match="mode"):
        load_config(RunConfig, q, ["mode=sometimes"])
    with pytest.raises(ConfigError, match="temperature"):
        load_config(RunConfig, q, ["rollout.temperature=0.5"])
    with pytest.raises(ConfigError, match="min_group_size"):
        load_config(RunConfig, q, ["rollout.min_group_size=99"])
    with pytest.raises(ConfigError, match="stalenes"):
        load_config(RunConfig, q, ["max_stalenes=1"])
    with pytest.raises(ConfigError, match="fresh_names"):
        load_config(RunConfig, q, ["model.bootstrap.fresh_names=1.0"])
    assert load_config(RunConfig, CONFIGS / "multistep.toml", ["model.bootstrap.fresh_names=1.0"])


def test_data_parallel_override_and_its_placement():
    q = CONFIGS / "quickstart.toml"
    cfg = load_config(RunConfig, q, ["trainer.data_parallel=2", 'trainer.precision="bf16-mixed"'])
    assert (cfg.trainer.data_parallel, cfg.trainer.precision) == (2, "bf16-mixed")
    with pytest.raises(ConfigError, match="data_parallel"):
        load_config(RunConfig, q, ["trainer.data_parallel=2", 'placement.backend="ray"'])
    with pytest.raises(ConfigError, match="precision"):
        load_config(RunConfig, q, ['trainer.precision="fp8"'])


def test_moe_quickstart_replays_routes():
    cfg = load_config(RunConfig, CONFIGS / "quickstart-moe.toml")
    assert cfg.model.spec is not None and cfg.model.spec.arch == "moe" and cfg.trainer.router_replay
