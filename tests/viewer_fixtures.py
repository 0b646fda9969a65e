"""A small run folder made of real trajectory records (inhabit.types), for the viewer's tests
(tests/unit/observability, and tests/integration/test_viewer_browser.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhabit.types import MessageRecord, Segment, ToolCallRecord, Trajectory, TurnRecord


def make_trajectory(i: int, *, task_id: str = "", text: str = "", flags: tuple[str, ...] = ()) -> Trajectory:
    """Episode `i`: reads calc.py and fixes it with edit_file (even i) or fails (odd i)."""
    win = i % 2 == 0
    turn0 = TurnRecord(
        text=text or '<tool name="read_file"><path>calc.py</path></tool><tool name="list_dir"></tool>',
        completion_token_ids=[5, 6, 7],
        logprobs=[-0.1, -2.0, -0.01],
        versions=[i // 4] * 3,
    )
    turn1 = TurnRecord(text='<tool name="edit_file">...</tool>', versions=[i // 4])
    calls = [
        ToolCallRecord(segment=0, turn=0, index=0, tool="read_file", args={"path": "calc.py"},
                       observation="1\tdef add(a, b):\n2\t    return a - b\n"),
        ToolCallRecord(segment=0, turn=0, index=1, tool="list_dir", args={}, observation="calc.py\ntests/"),
        ToolCallRecord(segment=0, turn=1, index=0, tool="edit_file",
                       args={"path": "calc.py", "old": "return a - b", "new": "return a + b" if win else "return b"},
                       observation="edited calc.py"),
    ]  # fmt: skip
    return Trajectory(
        task_id=task_id or f"t-{i % 3}",
        instruction="Fix add in calc.py.",
        status="finished" if i % 5 else "turn_limit",
        segments=[
            Segment(index=0, messages=[MessageRecord(role="user", content="Fix add")], turns=[turn0, turn1])
        ],
        tool_calls=calls,
        reward=1.0 if win else 0.0,
        reward_parts={"tests": 1.0 if win else 0.0},
        flags=list(flags),
        grading={
            "status": "graded",
            "outcomes": {"tests/test_calc.py::test_add": "passed" if win else "failed"},
            "messages": {} if win else {"tests/test_calc.py::test_add": "assert 3 == 5"},
            "fatal_flags": [f for f in flags if f == "code_uses_pytest"],
        },
        metadata={"purpose": "train" if i % 4 else "eval:before", "group": i // 4, "rollout": i % 4},
    )


def write_run(root: Path, trajectories: list[Trajectory], steps: int = 3) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"mode": "async", "steps": steps, "max_staleness": 2}))
    with (root / "trajectories.jsonl").open("w") as f:
        for t in trajectories:
            f.write(t.to_json() + "\n")
    with (root / "metrics.jsonl").open("w") as f:
        for s in range(1, steps + 1):
            f.write(json.dumps({"step": s, "reward": {"mean": s / 10}, "success_rate": s / 20}) + "\n")
    (root / "eval.json").write_text(json.dumps({"before": {"success_rate": 0.25, "rollouts": 8, "tasks": 4}}))
    for t in ("t-0", "t-1", "t-2"):
        ws = root / "cache" / "tasks-abc" / t / "workspace"
        ws.mkdir(parents=True)
        (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    return root


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    return write_run(tmp_path / "run-a", [make_trajectory(i) for i in range(12)])
