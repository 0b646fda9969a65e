"""Shared config base: pydantic models loaded from TOML files plus dotted CLI overrides.

Every config in inhabit subclasses `Config` (extra fields are errors, so a typo in a TOML key
fails loudly instead of being ignored). A run is a TOML file plus overrides such as
`trainer.lr=1e-5` or `sandbox.backend="process"`; override values are parsed as TOML values
(numbers, booleans, strings, arrays, inline tables) and fall back to a bare string, so
`sandbox.backend=process` works too.

    cfg = load_config(RunConfig, "configs/quickstart.toml", ["trainer.lr=1e-5"])
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from inhabit.errors import ConfigError

C = TypeVar("C", bound="Config")


class Config(BaseModel):
    """Base of every inhabit config: strict keys, validated on assignment, documented fields."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, frozen=False)


def parse_override_value(text: str) -> Any:
    """Parse the right-hand side of `key=value` as a TOML value, else keep it as a string."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of `data` with each `a.b.c=value` override set (creating tables as needed)."""
    result = _deep_copy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"override {item!r} is not of the form dotted.key=value (e.g. trainer.lr=1e-5)")
        node = result
        parts = key.split(".")
        for part in parts[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ConfigError(f"override {item!r}: {part!r} is a value, not a table")
            node = child
        node[parts[-1]] = parse_override_value(raw.strip())
    return result


def _deep_copy(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _deep_copy(v) if isinstance(v, Mapping) else v for k, v in data.items()}


def read_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML file, turning I/O and syntax problems into ConfigError."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            return tomllib.load(f)
    except FileNotFoundError as e:
        raise ConfigError(f"config file {path} does not exist") from e
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {path} is not valid TOML: {e}") from e


def validate_config(cls: type[C], data: Mapping[str, Any], source: str = "config") -> C:
    """Validate `data` as `cls`, reporting every problem with its dotted location."""
    try:
        return cls.model_validate(data)
    except ValidationError as e:
        lines = []
        for err in e.errors():
            loc = ".".join(str(p) for p in err["loc"]) or "(root)"
            lines.append(f"  {loc}: {err['msg']}")
        raise ConfigError(f"invalid {source}:\n" + "\n".join(lines)) from e


def load_config(cls: type[C], path: str | Path | None = None, overrides: Iterable[str] = ()) -> C:
    """Load `cls` from an optional TOML file plus dotted overrides."""
    data = read_toml(path) if path is not None else {}
    data = apply_overrides(data, overrides)
    return validate_config(cls, data, source=str(path) if path else "config")
