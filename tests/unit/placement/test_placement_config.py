"""`placement.backend` / `placement = "ray"` and `[placement.ray]` parse; mistakes are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from inhabit.config import load_config
from inhabit.errors import ConfigError
from inhabit.orchestrator.config import RunConfig
from inhabit.placement.config import ActorResources, RayConfig

QUICKSTART = Path(__file__).resolve().parents[3] / "configs" / "quickstart.toml"


def test_local_is_the_default_and_one_field_switches_to_ray():
    assert load_config(RunConfig, QUICKSTART).placement.backend == "local"
    cfg = load_config(RunConfig, QUICKSTART, ["placement=ray"])  # the shorthand
    assert cfg.placement.backend == "ray" and cfg.placement.trainer == "thread"
    cfg = load_config(RunConfig, QUICKSTART, ["placement.backend=ray", "placement.ray.engines=4"])
    assert cfg.placement.ray.engines == 4


def test_ray_table_in_toml(tmp_path):
    text = QUICKSTART.read_text() + (
        '\n[placement]\nbackend = "ray"\n[placement.ray]\naddress = "auto"\nengines = 3\noversample = 2\n'
        "deadline_s = 90\nengine = { num_cpus = 2, resources = { rollout = 1 } }\n"
    )
    path = tmp_path / "ray.toml"
    path.write_text(text)
    rc = load_config(RunConfig, path).placement.ray
    assert (rc.address, rc.engines, rc.oversample, rc.deadline_s) == ("auto", 3, 2, 90)
    assert rc.engine.options() == {"num_cpus": 2, "num_gpus": 0.0, "resources": {"rollout": 1}}


@pytest.mark.parametrize(
    "override",
    [
        "placement=everywhere",
        "placement.ray.engines=0",
        "placement.ray.deadline_s=0",
        "placement.ray.enignes=2",
    ],
)
def test_mistakes_are_refused(override):
    with pytest.raises(ConfigError):
        load_config(RunConfig, QUICKSTART, [override])


def test_defaults_ask_for_one_cpu_and_no_pool():
    rc = RayConfig()
    assert rc.engine == ActorResources() and rc.engine.options()["resources"] == {}
    assert rc.max_attempts >= 2 and rc.oversample == 0 and rc.deadline_s is None


def test_ray_placement_refuses_remote_sandboxes_without_touching_ray():
    from inhabit.placement.cluster import RayPlacement

    cfg = load_config(RunConfig, QUICKSTART, ["placement=ray", "sandbox.backend=remote"])
    with pytest.raises(ConfigError, match="env servers"):
        RayPlacement(cfg)


def test_a_run_config_is_the_settings_a_placement_reads():
    """`RunSettings` (what LocalPlacement and RayPlacement read) names only what `RunConfig` has."""
    from inhabit.orchestrator.config import RunConfig
    from inhabit.placement.config import RunSettings

    cfg = RunConfig.model_validate({"model": {"path": "m"}, "tasks": {"source": "dir", "dir": "t"}})
    assert isinstance(cfg, RunSettings)
    assert not isinstance(cfg.placement, RunSettings)  # the check can fail
