"""An incremental index of `trajectories.jsonl`: byte offsets plus the few fields the table shows.

The episodes table of a run with 100k rollouts must not read the whole file per page. The index
reads the file once, from the start, and afterwards only the bytes appended since (the file is
append-only while a run lives, docs/architecture.md "Run folder"); a partly written last line is
left for the next refresh. Per line it keeps a small `Row` (task, status, reward, flags, policy
version, first tool, purpose, turns) and the line's offset and length, so a page of the table is
answered from memory and one episode is one seek and one read.

The file is opened through `opener` (default `open`), so a test can count the bytes read.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

SORT_KEYS = ("n", "task_id", "status", "reward", "version", "turns", "first_tool", "purpose")
"""Columns the table may be sorted by."""


@dataclass(frozen=True, slots=True)
class Row:
    """One trajectory's line in the file, and what the table needs of it."""

    n: int
    offset: int
    length: int
    task_id: str
    status: str
    reward: float | None
    flags: tuple[str, ...]
    version: int | None
    """The policy version of the episode's first generated token (the weights it started with)."""
    version_max: int | None
    first_tool: str
    purpose: str
    turns: int
    tool_calls: int


@dataclass(frozen=True)
class Filters:
    """What the table's filter form asks for; empty fields filter nothing."""

    task: str = ""
    status: str = ""
    purpose: str = ""
    flag: str = ""
    """A flag name, or "any" for every flagged episode, or "none" for unflagged ones."""
    first_tool: str = ""
    reward_min: float | None = None
    reward_max: float | None = None
    version_min: int | None = None
    version_max: int | None = None

    def accepts(self, r: Row) -> bool:
        if self.task and self.task not in r.task_id:
            return False
        if self.status and r.status != self.status:
            return False
        if self.purpose and r.purpose != self.purpose:
            return False
        if self.first_tool and r.first_tool != self.first_tool:
            return False
        if self.flag == "any" and not r.flags:
            return False
        if self.flag == "none" and r.flags:
            return False
        if self.flag not in ("", "any", "none") and self.flag not in r.flags:
            return False
        if self.reward_min is not None and (r.reward is None or r.reward < self.reward_min):
            return False
        if self.reward_max is not None and (r.reward is None or r.reward > self.reward_max):
            return False
        if self.version_min is not None and (r.version is None or r.version < self.version_min):
            return False
        return not (self.version_max is not None and (r.version is None or r.version > self.version_max))


def row_from_record(n: int, offset: int, length: int, d: dict[str, Any]) -> Row:
    """The table's fields of one parsed trajectory record (tolerant of missing fields)."""
    versions = [
        v
        for seg in d.get("segments") or []
        for turn in seg.get("turns") or []
        for v in (turn.get("versions") or [])
    ]
    calls = d.get("tool_calls") or []
    first = (calls[0].get("tool") or "malformed") if calls else "none"
    turns = sum(
        1
        for seg in d.get("segments") or []
        for t in seg.get("turns") or []
        if t.get("kind", "action") == "action"
    )
    reward = d.get("reward")
    return Row(
        n=n,
        offset=offset,
        length=length,
        task_id=str(d.get("task_id", "")),
        status=str(d.get("status", "")),
        reward=float(reward) if isinstance(reward, int | float) else None,
        flags=tuple(str(f) for f in d.get("flags") or []),
        version=min(versions) if versions else None,
        version_max=max(versions) if versions else None,
        first_tool=str(first),
        purpose=str((d.get("metadata") or {}).get("purpose", "")),
        turns=turns,
        tool_calls=len(calls),
    )


class TrajectoryIndex:
    """The rows of one `trajectories.jsonl`, brought up to date by `refresh()`."""

    def __init__(self, path: Path, opener: Callable[..., IO[bytes]] = open) -> None:
        self.path = path
        self._open = opener
        self.rows: list[Row] = []
        self.indexed_bytes = 0
        self.bad_lines = 0
        self._lock = threading.Lock()

    def refresh(self) -> int:
        """Index the lines appended since the last call; returns how many rows were added."""
        with self._lock:
            try:
                size = self.path.stat().st_size
            except FileNotFoundError:
                return 0
            if size < self.indexed_bytes:  # the file was replaced: start over
                self.rows, self.indexed_bytes, self.bad_lines = [], 0, 0
            if size == self.indexed_bytes:
                return 0
            added = 0
            with self._open(self.path, "rb") as f:
                f.seek(self.indexed_bytes)
                pos = self.indexed_bytes
                while True:
                    line = f.readline()
                    if not line or not line.endswith(b"\n"):
                        break  # a line still being written: next refresh
                    try:
                        d = json.loads(line)
                        if not isinstance(d, dict):
                            raise ValueError("not an object")
                        self.rows.append(row_from_record(len(self.rows), pos, len(line), d))
                        added += 1
                    except ValueError:
                        self.bad_lines += 1
                    pos += len(line)
            self.indexed_bytes = pos
            return added

    def query(
        self, filters: Filters, sort: str = "n", descending: bool = False, page: int = 1, per_page: int = 50
    ) -> tuple[list[Row], int]:
        """One page of the rows `filters` accepts, sorted; and how many rows it accepts in all."""
        if sort not in SORT_KEYS:
            sort = "n"
        rows = [r for r in self.rows if filters.accepts(r)]

        def key(r: Row) -> tuple[bool, Any]:
            v = getattr(r, sort)
            return (v is None, v if v is not None else 0)

        rows.sort(key=key, reverse=descending)
        start = max(0, (page - 1) * per_page)
        return rows[start : start + per_page], len(rows)

    def choices(self) -> dict[str, list[str]]:
        """The values the filter form offers (status, purpose, first tool, flags)."""
        out: dict[str, set[str]] = {"status": set(), "purpose": set(), "first_tool": set(), "flag": set()}
        for r in self.rows:
            out["status"].add(r.status)
            out["purpose"].add(r.purpose)
            out["first_tool"].add(r.first_tool)
            out["flag"].update(r.flags)
        return {k: sorted(v) for k, v in out.items()}

    def record(self, n: int) -> dict[str, Any]:
        """Trajectory `n` as parsed JSON: one seek and one read of its line."""
        row = self.rows[n]
        with self._open(self.path, "rb") as f:
            f.seek(row.offset)
            return json.loads(f.read(row.length))
