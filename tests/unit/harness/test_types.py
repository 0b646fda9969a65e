"""The trajectory record: frozen, strict, and a lossless JSON round trip."""

from __future__ import annotations

import pydantic
import pytest

from inhabit.types import MessageRecord, Segment, ToolCallRecord, Trajectory, TurnRecord


def sample() -> Trajectory:
    turn = TurnRecord(
        text='<tool name="finish"><message>ok</message></tool>',
        prompt_token_ids=[1, 2],
        completion_token_ids=[3, 4, 5],
        logprobs=[-0.1, -0.2, -0.3],
        routed_experts=[[[0, 3], [1, 2]]] * 3,
        versions=[4, 4, 5],
        completion_tokens=3,
    )
    return Trajectory(
        task_id="demo-001",
        instruction="fix it",
        status="finished",
        segments=[
            Segment(
                index=0, messages=[MessageRecord(role="system", content="s")], turns=[turn], summary="so far"
            ),
            Segment(index=1, messages=[MessageRecord(role="user", content="t")], turns=[]),
        ],
        tool_calls=[
            ToolCallRecord(
                segment=1, turn=0, index=0, tool="finish", args={"message": "ok", "n": 3}, observation="done"
            )
        ],
        summaries=["so far"],
        final_message="ok",
        reward=1.0,
        reward_parts={"tests": 1.0},
        flags=["conftest_changed"],
        grading={"outcomes": {"t::a": "passed"}},
        timings={"episode_s": 1.5},
        policy="ScriptedPolicy",
    )


def test_json_round_trip_is_lossless() -> None:
    traj = sample()
    assert Trajectory.from_json(traj.to_json()) == traj
    assert traj.num_turns == 1


def test_records_are_frozen_and_strict() -> None:
    traj = sample()
    with pytest.raises(pydantic.ValidationError):
        traj.status = "error"  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        Trajectory.model_validate({**traj.model_dump(), "surprise": 1})
    with pytest.raises(pydantic.ValidationError):
        Trajectory.model_validate({**traj.model_dump(), "status": "kinda done"})
