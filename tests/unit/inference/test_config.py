"""The shipped serve config parses, and bad engine settings are refused with their dotted name."""

from __future__ import annotations

from pathlib import Path

import pytest

from inhabit.config import load_config
from inhabit.errors import ConfigError
from inhabit.inference.config import ServeConfig

CONFIG = Path(__file__).resolve().parents[3] / "configs" / "serve.toml"


def test_shipped_serve_config_parses():
    cfg = load_config(ServeConfig, CONFIG, ["model=models/moe-2m", "engine.max_batch_size=8"])
    assert cfg.host == "127.0.0.1" and cfg.engine.max_batch_size == 8 and cfg.engine.dtype == "auto"


def test_bad_values_name_their_key():
    with pytest.raises(ConfigError, match=r"engine\.kv_after_swap"):
        load_config(ServeConfig, CONFIG, ["model=m", "engine.kv_after_swap=sometimes"])
    with pytest.raises(ConfigError, match=r"engine\.typo"):
        load_config(ServeConfig, CONFIG, ["model=m", "engine.typo=1"])
