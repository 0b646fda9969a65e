"""The backend registries: one place per kind maps a name to its code, read by config validation,
the commands and the factories; an unknown name fails in one line that lists the known ones; and
no other place in the source lists the names of a kind."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import inhabit
from inhabit.config import Config, validate_config
from inhabit.errors import ConfigError
from inhabit.placement.config import LOCAL_TRAINERS, PLACEMENTS, PlacementConfig
from inhabit.placement.engine_backends import ENGINE_BACKENDS, RunEngineConfig
from inhabit.registry import Registry
from inhabit.sandbox import SandboxConfig
from inhabit.sandbox.backends import SANDBOX_BACKENDS

SRC = Path(inhabit.__file__).resolve().parent
REGISTRIES = {
    "sandbox/backends.py": SANDBOX_BACKENDS,
    "placement/engine_backends.py": ENGINE_BACKENDS,
    "placement/config.py": (PLACEMENTS, LOCAL_TRAINERS),
}


def _tiny_registry() -> Registry:
    r: Registry = Registry("widget")
    r.register("plain", "inhabit.errors:ConfigError", "a plain widget")
    r.register("far", "inhabit.no_such_module:Thing", "a widget elsewhere", local=False)
    return r


def test_names_choices_and_one_line_errors():
    r = _tiny_registry()
    assert r.names() == ("plain", "far") and r.names(local_only=True) == ("plain",)
    assert r.choices() == "plain or far"
    assert r.check("plain") == "plain"
    with pytest.raises(ConfigError) as e:
        r.check("nope")
    assert str(e.value) == "unknown widget 'nope': use plain or far"
    with pytest.raises(ConfigError) as e:
        r.check("far", local_only=True)
    assert "\n" not in str(e.value) and "'far'" in str(e.value) and str(e.value).endswith("use plain")


def test_load_imports_only_when_asked_and_refuses_twice_registered_names():
    r = _tiny_registry()
    assert r.load("plain") is ConfigError
    with pytest.raises(ModuleNotFoundError):  # registering "far" imported nothing
        r.load("far")
    with pytest.raises(ValueError, match="twice"):
        r.register("plain", "inhabit.errors:ConfigError", "again")
    with pytest.raises(ValueError, match="module:attribute"):
        r.register("bad", "inhabit.errors.ConfigError", "no colon")


def test_a_config_field_of_registered_names_fails_in_one_line():
    r = _tiny_registry()
    widget_name = r.name_type(local_only=True)

    class Settings(Config):
        widget: widget_name = "plain"  # type: ignore[valid-type]

    assert validate_config(Settings, {}).widget == "plain"
    with pytest.raises(ConfigError) as e:
        validate_config(Settings, {"widget": "{odd}"})
    assert str(e.value).splitlines()[1] == "  widget: unknown widget '{odd}': use plain"


@pytest.mark.parametrize(
    ("cls", "data", "line"),
    [
        (SandboxConfig, {"backend": "nope"}, "backend: unknown sandbox backend 'nope': use auto, bwrap, process or remote"),
        (RunEngineConfig, {"backend": "nope"}, "backend: unknown engine backend 'nope': use embedded, vllm or remote"),
        (PlacementConfig, {"backend": "nope"}, "backend: unknown placement 'nope': use local or ray"),
        (PlacementConfig, {"trainer": "nope"}, "trainer: unknown local trainer 'nope': use thread or process"),
    ],
)  # fmt: skip
def test_run_configs_check_names_against_their_registry(cls, data, line):
    with pytest.raises(ConfigError) as e:
        validate_config(cls, data)
    assert str(e.value).splitlines()[1].strip() == line


@pytest.mark.parametrize("registry", [SANDBOX_BACKENDS, ENGINE_BACKENDS, PLACEMENTS, LOCAL_TRAINERS])
def test_every_registered_backend_loads(registry):
    for name in registry.names():
        assert callable(registry.load(name)) or hasattr(registry.load(name), "start"), name


def test_engine_backends_provide_the_whole_protocol():
    for name in ENGINE_BACKENDS.names():
        backend = ENGINE_BACKENDS.load(name)
        for method in ("problem", "check", "describe", "start"):
            assert callable(getattr(backend, method)), (name, method)


def _string_groups(tree: ast.AST):
    """(line, names) of every tuple, list or set of string constants, and every Literal[...]."""
    for node in ast.walk(tree):
        elts = None
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            elts = node.elts
        elif isinstance(node, ast.Subscript) and ast.unparse(node.value) in ("Literal", "typing.Literal"):
            elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if elts:
            strings = {e.value for e in elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
            yield node.lineno, strings


def test_no_other_place_lists_the_names_of_a_kind():
    """Two or more names of one kind written together outside its registry's module is a second
    list of them (a tuple to check a value against, a Literal field, choices of an option)."""
    kinds = []
    for home, registries in REGISTRIES.items():
        for r in registries if isinstance(registries, tuple) else (registries,):
            kinds.append((home, r.kind, set(r.names())))
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        for line, strings in _string_groups(ast.parse(path.read_text())):
            for home, kind, names in kinds:
                if rel != home and len(strings & names) >= 2:
                    found.append(f"{rel}:{line} lists {kind} names {sorted(strings & names)}")
    assert found == []
