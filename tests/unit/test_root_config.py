"""Config loading: TOML + dotted overrides, strict keys, readable errors."""

from __future__ import annotations

import pytest
from pydantic import Field

from inhabit.config import Config, apply_overrides, load_config, parse_override_value
from inhabit.errors import ConfigError


class Inner(Config):
    lr: float = Field(1e-3, gt=0)
    name: str = "adam"


class Outer(Config):
    steps: int = 10
    inner: Inner = Inner()
    tags: list[str] = []


def test_override_values_parse_as_toml_with_string_fallback():
    assert parse_override_value("3") == 3
    assert parse_override_value("1e-5") == 1e-5
    assert parse_override_value("true") is True
    assert parse_override_value('["a", "b"]') == ["a", "b"]
    assert parse_override_value("process") == "process"


def test_load_toml_with_dotted_overrides(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text('steps = 5\n[inner]\nname = "sgd"\n')
    cfg = load_config(Outer, path, ["inner.lr=0.5", "tags=['x']"])
    assert cfg.steps == 5 and cfg.inner.name == "sgd" and cfg.inner.lr == 0.5 and cfg.tags == ["x"]


def test_unknown_key_is_an_error_naming_the_location(tmp_path):
    path = tmp_path / "run.toml"
    path.write_text("[inner]\nlearning_rate = 1\n")
    with pytest.raises(ConfigError, match=r"inner\.learning_rate"):
        load_config(Outer, path)


def test_bounds_are_enforced():
    with pytest.raises(ConfigError, match=r"inner\.lr"):
        load_config(Outer, None, ["inner.lr=-1"])


@pytest.mark.parametrize("bad", ["noequals", "=3", "a..b=1"])
def test_malformed_override_is_a_config_error(bad):
    with pytest.raises(ConfigError):
        apply_overrides({}, [bad])


def test_override_through_a_value_is_rejected():
    with pytest.raises(ConfigError, match="is a value"):
        apply_overrides({"steps": 3}, ["steps.x=1"])


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Outer, tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("steps = = 3")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(Outer, bad)
