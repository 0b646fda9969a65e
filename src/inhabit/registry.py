"""One registry per kind of backend: each backend's name, what it does and where its code lives,
written once.

A kind (sandbox backends, engine backends, placements, trainer handles) keeps one `Registry`,
filled in the module that defines the kind:

    SANDBOX_BACKENDS.register("process", "inhabit.sandbox.backends:process_provider",
                              "a plain subprocess in a temporary copy; isolates nothing", local=True)

Everything that names a backend reads that registry and nothing else: config validation (the
field type `name_type()` gives), the command line (`names()` for its help, `check()` for a
value) and the factory (`load(name)`, which imports the backend's module only then, so that a
registry costs no import and `--help` stays instant). An unknown name fails in one line that
lists the known ones. A new backend is its module plus one `register` call.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Annotated, Any, Generic, TypeVar

from pydantic import AfterValidator
from pydantic_core import PydanticCustomError

from inhabit.errors import ConfigError

__all__ = ["Entry", "Registry"]

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One registered backend."""

    name: str
    target: str
    """"module:attribute" of what builds it (a factory function or a class)."""
    description: str
    local: bool
    """Runs on this machine without a server elsewhere (what commands that take no URL accept)."""


class Registry(Generic[T]):
    """Names of one kind of backend mapped to what builds each (see the module docstring)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, target: str, description: str, *, local: bool = True) -> None:
        """Add a backend: `target` is "module:attribute", imported by `load` only."""
        module, sep, attribute = target.partition(":")
        if not (sep and module and attribute):
            raise ValueError(f"{self.kind} {name!r}: target {target!r} is not 'module:attribute'")
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = Entry(name, target, description, local)

    def names(self, *, local_only: bool = False) -> tuple[str, ...]:
        """The registered names, in registration order (`local_only`: those with `local`)."""
        return tuple(n for n, e in self._entries.items() if e.local or not local_only)

    def entries(self) -> tuple[Entry, ...]:
        return tuple(self._entries.values())

    def choices(self, *, local_only: bool = False) -> str:
        """The names as a command's help says them: "auto, bwrap or process"."""
        names = self.names(local_only=local_only)
        return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"

    def unknown(self, name: str, *, local_only: bool = False) -> str:
        """The one-line error for a name that is not one of ours (or, with `local_only`, not local)."""
        choices = self.choices(local_only=local_only)
        if local_only and name in self._entries:
            return f"{self.kind} {name!r} needs a server elsewhere, not accepted here: use {choices}"
        return f"unknown {self.kind} {name!r}: use {choices}"

    def check(self, name: str, *, local_only: bool = False) -> str:
        """`name` when it is registered (and local, with `local_only`); ConfigError otherwise."""
        if name not in self.names(local_only=local_only):
            raise ConfigError(self.unknown(name, local_only=local_only))
        return name

    def load(self, name: str) -> T:
        """What builds backend `name`, its module imported now."""
        entry = self._entries.get(name)
        if entry is None:
            raise ConfigError(self.unknown(name))
        module, _, attribute = entry.target.partition(":")
        return getattr(importlib.import_module(module), attribute)

    def name_type(self, *, local_only: bool = False) -> Any:
        """The type of a config field that holds one of the names (a `str` checked against the
        registry when the config is validated, with the same one-line error)."""

        def registered(value: str) -> str:
            if value not in self.names(local_only=local_only):
                message = self.unknown(value, local_only=local_only)
                raise PydanticCustomError("unknown_backend", "{message}", {"message": message})
            return value

        return Annotated[str, AfterValidator(registered)]
