"""The trajectory index: incremental (reads only appended bytes), pages from memory, one read per episode."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from inhabit.observability.viewer.index import Filters, TrajectoryIndex


class CountingFile(io.BufferedReader):
    """A file whose reads add to a shared counter."""

    def __init__(self, raw: Any, counter: list[int]) -> None:
        super().__init__(raw)
        self.counter = counter

    def read(self, size: int | None = -1) -> bytes:
        data = super().read(size)
        self.counter[0] += len(data)
        return data

    def readline(self, size: int | None = -1) -> bytes:
        data = super().readline(size)
        self.counter[0] += len(data)
        return data


def counting_opener(counter: list[int]):
    def opener(path: Path, mode: str = "rb") -> CountingFile:
        return CountingFile(io.FileIO(path, "r"), counter)

    return opener


def line(i: int) -> str:
    """A trajectory-shaped record with a bulky body, as real ones are."""
    return json.dumps(
        {
            "task_id": f"task-{i % 100}",
            "status": "finished" if i % 7 else "turn_limit",
            "reward": float(i % 3 == 0),
            "flags": ["tests_skipped"] if i % 50 == 0 else [],
            "segments": [
                {"index": 0, "messages": [], "turns": [{"text": "x" * 300, "versions": [i // 1000]}]}
            ],
            "tool_calls": [
                {"turn": 0, "index": 0, "tool": "read_file" if i % 2 else "grep", "observation": "y" * 200}
            ],
            "metadata": {"purpose": "train"},
        }
    )


def test_large_file_is_indexed_once_and_then_only_appended_bytes_are_read(tmp_path: Path):
    path = tmp_path / "trajectories.jsonl"
    n = 20_000
    path.write_text("".join(line(i) + "\n" for i in range(n)))
    counter = [0]
    index = TrajectoryIndex(path, opener=counting_opener(counter))
    assert index.refresh() == n
    first_pass = counter[0]
    assert first_pass == path.stat().st_size

    # A page of the table and a refresh with nothing new read nothing from the file.
    counter[0] = 0
    assert index.refresh() == 0
    rows, total = index.query(
        Filters(first_tool="grep", reward_min=1.0), sort="version", descending=True, page=3
    )
    assert counter[0] == 0
    assert len(rows) == 50 and total == sum(1 for i in range(n) if i % 2 == 0 and i % 3 == 0)
    assert all(r.first_tool == "grep" and r.reward == 1.0 for r in rows)
    assert [r.version for r in rows] == sorted((r.version for r in rows), reverse=True)

    # Appending 10 lines: the next refresh reads those bytes only.
    appended = "".join(line(n + i) + "\n" for i in range(10))
    with path.open("a") as f:
        f.write(appended)
    assert index.refresh() == 10
    assert counter[0] == len(appended.encode())
    assert len(index.rows) == n + 10

    # One episode is one read of its own line.
    counter[0] = 0
    rec = index.record(12_345)
    assert rec["task_id"] == "task-45"
    assert counter[0] == index.rows[12_345].length


def test_a_partly_written_line_waits_for_its_newline(tmp_path: Path):
    path = tmp_path / "trajectories.jsonl"
    full = line(0) + "\n"
    partial = line(1)
    path.write_text(full + partial[:40])
    index = TrajectoryIndex(path)
    assert index.refresh() == 1
    with path.open("a") as f:
        f.write(partial[40:] + "\n")
    assert index.refresh() == 1
    assert [r.task_id for r in index.rows] == ["task-0", "task-1"]
    assert index.record(1)["task_id"] == "task-1"


def test_bad_lines_are_counted_not_fatal_and_a_replaced_file_is_reindexed(tmp_path: Path):
    path = tmp_path / "trajectories.jsonl"
    path.write_text(line(0) + "\nnot json\n[1, 2]\n" + line(1) + "\n")
    index = TrajectoryIndex(path)
    assert index.refresh() == 2 and index.bad_lines == 2
    assert index.record(1)["task_id"] == "task-1"
    path.write_text(line(5) + "\n")  # shorter: a new file
    index.refresh()
    assert [r.task_id for r in index.rows] == ["task-5"]


def test_filters_by_flag_status_task_and_version(tmp_path: Path):
    path = tmp_path / "trajectories.jsonl"
    path.write_text("".join(line(i) + "\n" for i in range(3000)))
    index = TrajectoryIndex(path)
    index.refresh()
    flagged, total = index.query(Filters(flag="any"), per_page=1000)
    assert total == 60 and all(r.flags == ("tests_skipped",) for r in flagged)
    assert index.query(Filters(flag="none"))[1] == 3000 - 60
    assert index.query(Filters(flag="tests_skipped", status="turn_limit"))[1] == sum(
        1 for i in range(3000) if i % 50 == 0 and i % 7 == 0
    )
    assert index.query(Filters(task="task-42"))[1] == 30
    assert index.query(Filters(version_min=1, version_max=1))[1] == 1000
    assert index.choices()["flag"] == ["tests_skipped"]
    last_page, _ = index.query(Filters(), page=60, per_page=50)
    assert [r.n for r in last_page] == list(range(2950, 3000))
    assert index.query(Filters(), page=61)[0] == []
