"""What every tool is: its argument schema, its context, its observation, and argument binding.

A tool acts on a `Sandbox` only (never on the host). It returns an `Observation` (text for the
model); a problem the model caused (bad path, text not found, ...) raises `ToolError`, which the
loop turns into an error observation. Any other exception is a bug or an infrastructure fault and
is turned into an observation by the loop too, so no tool can crash a rollout.
"""

from __future__ import annotations

import abc
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from inhabit.harness.config import HarnessConfig
from inhabit.sandbox.base import WORKSPACE_MOUNT, Sandbox

ArgKind = Literal["text", "line", "int"]
"""text: kept exactly (file contents, edit strings); line: surrounding whitespace stripped
(paths, patterns, commands); int: stripped then parsed as a decimal integer."""


class ToolError(Exception):
    """A problem with the call that the model can fix; the message is shown to it."""


@dataclass(frozen=True)
class ArgSpec:
    name: str
    kind: ArgKind
    required: bool
    description: str


@dataclass(frozen=True)
class ToolSpec:
    name: str
    description: str
    args: tuple[ArgSpec, ...]

    def signature(self) -> str:
        """`read_file(path, start_line?, end_line?)`, as docs/architecture.md writes it."""
        parts = [a.name + ("" if a.required else "?") for a in self.args]
        return f"{self.name}({', '.join(parts)})"


@dataclass(frozen=True)
class Observation:
    text: str
    error: bool = False
    truncated: bool = False


@dataclass
class ToolContext:
    """What a tool may use: the sandbox, the limits, the task's test command, a per-episode cache."""

    sandbox: Sandbox
    config: HarnessConfig
    test_command: str | None
    """The task's test command; None: run_tests picks a pytest the sandbox can run."""
    cache: dict[str, Any] = field(default_factory=dict)


class Tool(abc.ABC):
    spec: ToolSpec
    read_only: bool = True
    """Read-only tools run in parallel with anything; writes to one path are serialized by refusal."""

    def write_target(self, args: Mapping[str, Any]) -> str | None:
        """The workspace path this call writes, for same-turn conflict detection (None: no file write)."""
        return None

    @abc.abstractmethod
    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation: ...


def bind_args(spec: ToolSpec, raw: Mapping[str, str]) -> dict[str, Any]:
    """Check raw string arguments against `spec` and convert them; ToolError says what is wrong."""
    known = {a.name: a for a in spec.args}
    extra = [k for k in raw if k not in known]
    missing = [a.name for a in spec.args if a.required and a.name not in raw]
    problems = []
    if missing:
        problems.append("missing " + ", ".join(f"<{m}>" for m in missing))
    if extra:
        problems.append("unexpected " + ", ".join(f"<{e}>" for e in extra))
    bound: dict[str, Any] = {}
    for name, value in raw.items():
        arg = known.get(name)
        if arg is None:
            continue
        if arg.kind == "text":
            bound[name] = value
        elif arg.kind == "line":
            bound[name] = value.strip()
        else:
            stripped = value.strip()
            try:
                bound[name] = int(stripped, 10)
            except ValueError:
                problems.append(f"<{name}> must be an integer, got {stripped[:40]!r}")
    if problems:
        raise ToolError(f"{spec.name}: " + "; ".join(problems) + f". Usage: {spec.signature()}.")
    return bound


def workspace_path(path: str) -> str:
    """Normalize a model-given path to a workspace-relative one ('.' for the root)."""
    p = path.strip()
    if p == WORKSPACE_MOUNT or p.startswith(WORKSPACE_MOUNT + "/"):
        p = p[len(WORKSPACE_MOUNT) :].lstrip("/")
    p = posixpath.normpath(p) if p else "."
    if p.startswith("/") or p == ".." or p.startswith("../"):
        raise ToolError(f"path {path!r} is outside the workspace; use paths relative to the repository root.")
    return p


def cap_text(text: str, limit: int, hint: str) -> tuple[str, bool]:
    """Keep head and tail of `text` within `limit` characters around a marker that says how to see more."""
    if len(text) <= limit:
        return text, False
    head = limit * 2 // 3
    tail = limit - head
    cut = len(text) - head - tail
    marker = f"\n[... {cut} characters truncated; {hint} ...]\n"
    return text[:head] + marker + text[-tail:], True


def decode(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")
