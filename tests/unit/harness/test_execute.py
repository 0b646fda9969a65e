"""One turn's calls: concurrency, written-order observations, same-file write conflicts, errors."""

from __future__ import annotations

from inhabit.harness.execute import execute_calls
from inhabit.harness.parse import render_call
from inhabit.harness.tools import ToolContext


def turn(*calls: tuple[str, dict[str, str]]) -> str:
    return "\n".join(render_call(n, a) for n, a in calls)


async def test_calls_run_concurrently_and_report_in_written_order(ctx: ToolContext) -> None:
    # Call 1 can only finish if call 2 runs while it waits: sequential execution would time it out.
    waiter = "for i in $(seq 100); do [ -f flag ] && echo saw-flag && exit 0; sleep 0.05; done; exit 1"
    text = turn(
        ("run", {"command": waiter, "timeout_s": "20"}),
        ("run", {"command": "sleep 0.2; touch flag; echo made-flag"}),
        ("read_file", {"path": "calc.py", "end_line": "1"}),
    )
    out = await execute_calls(text, ctx, segment=0, turn=3)
    assert [r.index for r in out.records] == [0, 1, 2]
    assert "saw-flag" in out.records[0].observation and not out.records[0].error
    assert "made-flag" in out.records[1].observation
    assert out.records[2].observation.startswith("1\tdef add")
    assert all(r.turn == 3 for r in out.records)
    assert out.records[0].args == {"command": waiter, "timeout_s": 20}
    assert out.finish_message is None


async def test_two_writes_to_one_file_in_a_turn_refuse_the_later_one(ctx: ToolContext) -> None:
    text = turn(
        ("write_file", {"path": "calc.py", "content": "A = 1\n"}),
        ("edit_file", {"path": "./calc.py", "old": "A = 1", "new": "A = 2"}),
        ("write_file", {"path": "other.py", "content": "B = 1\n"}),
    )
    out = await execute_calls(text, ctx)
    assert not out.records[0].error and not out.records[2].error
    assert out.records[1].error and "already writes calc.py" in out.records[1].observation
    assert await ctx.sandbox.read_file("calc.py") == b"A = 1\n"


async def test_bad_calls_become_error_observations(ctx: ToolContext) -> None:
    text = (
        '<tool name="delete_everything"><path>.</path></tool>'
        '<tool name="read_file"><start_line>x</start_line></tool>'
        '<tool name="read_file"><path>calc.py</path>'
        '<tool name="finish"><message>done</message></tool>'
    )
    out = await execute_calls(text, ctx)
    assert [r.error for r in out.records] == [True, True, True, False]
    assert "unknown tool 'delete_everything'" in out.records[0].observation
    assert (
        "missing <path>" in out.records[1].observation and "must be an integer" in out.records[1].observation
    )
    assert "malformed call" in out.records[2].observation
    assert out.finish_message == "done"


async def test_a_tool_that_raises_becomes_an_observation(ctx: ToolContext) -> None:
    await ctx.sandbox.close()  # every sandbox operation now raises
    out = await execute_calls(turn(("read_file", {"path": "calc.py"}), ("run", {"command": "true"})), ctx)
    assert all(r.error and "failed:" in r.observation for r in out.records)
