"""eval.json's breakdown of rollouts by the tool of their first call."""

from __future__ import annotations

import pytest

from inhabit.orchestrator.evaluate import first_tool_breakdown
from inhabit.types import ToolCallRecord, Trajectory


def traj(*tools: str | None) -> Trajectory:
    calls = [
        ToolCallRecord(segment=0, turn=i, index=0, tool=tool, observation="") for i, tool in enumerate(tools)
    ]
    return Trajectory(task_id="t", instruction="i", status="finished", tool_calls=calls)


def test_breakdown_counts_shares_and_success_per_first_tool():
    trajs = [
        traj("read_file", "edit_file"),
        traj("read_file"),
        traj("edit_file", "finish"),
        traj(None),
        traj(),
        traj("rm_rf_everything"),
    ]
    wins = [True, False, True, False, False, False]
    out = first_tool_breakdown(trajs, wins)
    # an unnamed call, no call at all, a name the harness does not have
    assert set(out) == {"read_file", "edit_file", "malformed", "none", "unknown"}
    assert out["read_file"] == {"rollouts": 2, "share": pytest.approx(2 / 6), "success_rate": 0.5}
    assert out["edit_file"] == {"rollouts": 1, "share": pytest.approx(1 / 6), "success_rate": 1.0}
    assert out["malformed"]["rollouts"] == 1 and out["none"]["success_rate"] == 0.0
    assert sum(v["share"] * v["success_rate"] for v in out.values()) == pytest.approx(sum(wins) / len(wins))
