"""`inhabit agent`'s parts: the diff between repository and sandbox, applying it,
streaming turns to the terminal, and saving the session for online training.

Sessions are saved under the user's cache, never in the repository:
`$XDG_CACHE_HOME/inhabit/repos/<repo id>/sessions/` (`~/.cache` without XDG_CACHE_HOME), the repo id
a hash of its resolved path (as the online store's `repo_id_of`). The one file inhabit reads from a
repository is the one its user writes to opt in to online learning (`.inhabit/online.toml`).

The agent never touches the real repository while it works: it acts on a sandbox copy. Only when
the user accepts the final diff (or passed --yes) are the changed files written back. Caches and
tool directories (.git, .inhabit, __pycache__, .pytest_cache, .ruff_cache, .mypy_cache, .venv,
node_modules, *.pyc) are never diffed nor applied.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rich.console import Console
from rich.markup import escape
from rich.panel import Panel

from inhabit.harness.loop import EpisodeObserver
from inhabit.sandbox.base import Sandbox
from inhabit.types import ToolCallRecord, Trajectory

EXCLUDED_DIRS = frozenset(
    {
        ".git",
        ".inhabit",
        "__pycache__",
        ".pytest_cache",
        ".ruff_cache",
        ".mypy_cache",
        ".venv",
        "node_modules",
    }
)


def sessions_dir(repo: Path) -> Path:
    """Where `inhabit agent` keeps the sessions of `repo`: under the user's cache, keyed by a hash."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    repo_id = hashlib.sha256(str(Path(repo).resolve()).encode()).hexdigest()[:16]
    return cache / "inhabit" / "repos" / repo_id / "sessions"


def _excluded(rel: str) -> bool:
    parts = rel.split("/")
    return any(p in EXCLUDED_DIRS for p in parts[:-1]) or parts[-1] in EXCLUDED_DIRS or rel.endswith(".pyc")


def host_files(repo: Path) -> dict[str, Path]:
    files: dict[str, Path] = {}
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = sorted(d for d in dirnames if d not in EXCLUDED_DIRS)
        for name in filenames:
            full = Path(dirpath) / name
            rel = full.relative_to(repo).as_posix()
            if not full.is_symlink() and not _excluded(rel):
                files[rel] = full
    return files


@dataclass(frozen=True)
class Change:
    path: str
    kind: Literal["added", "modified", "deleted"]
    before: bytes | None
    after: bytes | None


async def workspace_changes(repo: Path, sandbox: Sandbox) -> list[Change]:
    """Files the agent added, modified or deleted, comparing the sandbox with the repository."""
    host = host_files(repo)
    inside = {
        e.path
        for e in await sandbox.list_files(".", recursive=True)
        if e.kind == "file" and not _excluded(e.path)
    }
    changes = []
    for path in sorted(set(host) | inside):
        before = host[path].read_bytes() if path in host else None
        after = await sandbox.read_file(path) if path in inside else None
        if before == after:
            continue
        kind = "added" if before is None else "deleted" if after is None else "modified"
        changes.append(Change(path, kind, before, after))
    return changes


def render_diff(changes: list[Change]) -> str:
    out: list[str] = []
    for c in changes:
        if b"\0" in (c.before or b"")[:8192] or b"\0" in (c.after or b"")[:8192]:
            out.append(f"Binary file {c.path} {c.kind}\n")
            continue
        before = (c.before or b"").decode("utf-8", "replace").splitlines(keepends=True)
        after = (c.after or b"").decode("utf-8", "replace").splitlines(keepends=True)
        a = "/dev/null" if c.before is None else f"a/{c.path}"
        b = "/dev/null" if c.after is None else f"b/{c.path}"
        for line in difflib.unified_diff(before, after, a, b):
            out.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(out)


def apply_changes(repo: Path, changes: list[Change]) -> None:
    for c in changes:
        target = repo / c.path
        if c.after is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(c.after)


def save_session(
    repo: Path,
    trajectory: Trajectory,
    changes: list[Change],
    decision: str,
    *,
    model: str,
) -> Path:
    """Write the session (trajectory + the user's decision) to `sessions_dir(repo)`."""
    folder = sessions_dir(repo)
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    path = folder / f"{stamp}-{secrets.token_hex(3)}.json"
    record: dict[str, Any] = {
        "format": 1,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": model,
        "task": trajectory.instruction,
        "decision": decision,
        "changed_files": [{"path": c.path, "kind": c.kind} for c in changes],
        "diff": render_diff(changes),
        "trajectory": json.loads(trajectory.to_json()),
    }
    path.write_text(json.dumps(record, indent=1))
    return path


class ConsoleObserver(EpisodeObserver):
    """Streams each turn, call and summary to a rich console as the episode runs."""

    def __init__(self, console: Console, max_lines: int = 12) -> None:
        self.console = console
        self.max_lines = max_lines

    def _clip(self, text: str) -> str:
        lines = text.splitlines()
        if len(lines) > self.max_lines:
            lines = [*lines[: self.max_lines], f"... ({len(lines) - self.max_lines} more lines)"]
        return "\n".join(lines)

    def on_turn(self, turn: int, text: str) -> None:
        self.console.print(
            Panel(escape(self._clip(text) or "(empty)"), title=f"turn {turn + 1}", border_style="cyan")
        )

    def on_call(self, record: ToolCallRecord) -> None:
        args = ", ".join(f"{k}={str(v)[:60]!r}" for k, v in record.args.items())
        style = "red" if record.error else "green"
        self.console.print(f"[{style}]→ {record.tool}({escape(args)})[/{style}]")
        self.console.print(escape(self._clip(record.observation)), style="dim", highlight=False)

    def on_summary(self, summary: str) -> None:
        self.console.print(
            Panel(escape(self._clip(summary)), title="context summarized", border_style="yellow")
        )
