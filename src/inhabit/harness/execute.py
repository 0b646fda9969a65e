"""Run the tool calls of one model turn: parse, check, run concurrently, report in written order.

Rules (the system prompt tells the model the same):
- Every call of a turn starts at once (up to `max_parallel_calls`); observations come back in the
  order the calls were written, whatever order they finish in.
- Two calls that write the same file (write_file / edit_file on one path) in one turn would race;
  the first in written order runs, every later one gets an error observation instead.
- Calls come as the XML-like text of the harness's own format (`execute_calls`) or as OpenAI
  `tool_calls` entries of the native format (`execute_native_calls`); both go through the same
  argument checks and tools.
- A malformed call (in the native format: arguments that are not one JSON object), an unknown tool, bad arguments, a tool error, a tool that raises or that runs
  past `tool_timeout_s` each become an error observation. Nothing a model writes raises from here.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from inhabit.harness.parse import FORMAT_HINT, ParseProblem, ToolCall, arg_text, parse_tool_calls
from inhabit.harness.tools import TOOLS, ToolContext, ToolError, bind_args
from inhabit.harness.tools.base import Observation, Tool
from inhabit.log import get_logger
from inhabit.types import ToolCallRecord

log = get_logger(__name__)


@dataclass
class _Planned:
    index: int
    tool: str | None
    args: dict[str, Any]
    impl: Tool | None = None
    observation: Observation | None = None  # set when the call is refused before running
    duration_s: float = 0.0


@dataclass(frozen=True)
class TurnOutcome:
    records: list[ToolCallRecord]
    finish_message: str | None
    """The finish call's message when the turn finished the episode."""


def plan_calls(text: str) -> list[_Planned]:
    """Parse and check every call of a turn; refused calls carry their error observation."""
    return _plan(parse_tool_calls(text), FORMAT_HINT)


MALFORMED_CALL = "malformed call"
"""How the observation of a call the harness could not parse begins (bench/learning.py counts them)."""
NATIVE_HINT = "Give a tool's arguments as one JSON object."


def native_call(call: Mapping[str, Any]) -> ToolCall | ParseProblem:
    """An OpenAI `tool_calls` entry as a call with string arguments (numbers as decimals, booleans
    as true/false, lists and objects as JSON), so `bind_args` checks it as it checks XML calls."""
    fn = call.get("function") or {}
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        return ParseProblem(f"a tool call without a tool name. {NATIVE_HINT}")
    raw = fn.get("arguments", "{}")
    try:
        args = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as e:
        return ParseProblem(f"the arguments of {name!r} are not valid JSON ({e}). {NATIVE_HINT}", name)
    if not isinstance(args, dict):
        return ParseProblem(f"the arguments of {name!r} are not a JSON object. {NATIVE_HINT}", name)
    return ToolCall(name, {str(k): arg_text(v) for k, v in args.items()})


def _plan(items: Iterable[ToolCall | ParseProblem], hint: str) -> list[_Planned]:
    planned: list[_Planned] = []
    written: dict[str, int] = {}
    for i, item in enumerate(items):
        if isinstance(item, ParseProblem):
            planned.append(
                _Planned(i, item.name, {}, observation=Observation(f"{MALFORMED_CALL}: {item.message}", True))
            )
            continue
        raw = dict(item.args)
        tool = TOOLS.get(item.name)
        if tool is None:
            names = ", ".join(TOOLS)
            msg = f"unknown tool {item.name!r}. The tools are: {names}. {hint}".rstrip()
            planned.append(_Planned(i, item.name, raw, observation=Observation(msg, True)))
            continue
        try:
            args = bind_args(tool.spec, raw)
            target = tool.write_target(args)
        except ToolError as e:
            planned.append(_Planned(i, item.name, raw, observation=Observation(str(e), True)))
            continue
        if target is not None and target in written:
            first = written[target] + 1
            msg = (
                f"refused: call {first} of this turn already writes {target}. Two writes to one file in one "
                "turn would race; make this change in your next turn (after reading the result)."
            )
            planned.append(_Planned(i, item.name, args, observation=Observation(msg, True)))
            continue
        if target is not None:
            written[target] = i
        planned.append(_Planned(i, item.name, args, impl=tool))
    return planned


async def _run_one(call: _Planned, ctx: ToolContext, limit: asyncio.Semaphore) -> None:
    assert call.impl is not None
    async with limit:
        t0 = time.monotonic()
        try:
            call.observation = await asyncio.wait_for(
                call.impl.run(ctx, call.args), ctx.config.tool_timeout_s
            )
        except ToolError as e:
            call.observation = Observation(str(e), error=True)
        except TimeoutError:
            call.observation = Observation(
                f"{call.tool} did not finish within {ctx.config.tool_timeout_s:.0f}s and was abandoned.", True
            )
        except Exception as e:
            log.warning("tool %s raised", call.tool, exc_info=True)
            call.observation = Observation(f"{call.tool} failed: {type(e).__name__}: {e}", error=True)
        call.duration_s = time.monotonic() - t0


async def execute_calls(text: str, ctx: ToolContext, *, segment: int = 0, turn: int = 0) -> TurnOutcome:
    """Run every call written in `text` against `ctx.sandbox`; records come back in written order."""
    return await _execute(plan_calls(text), ctx, segment, turn)


async def execute_native_calls(
    tool_calls: Sequence[Mapping[str, Any]], ctx: ToolContext, *, segment: int = 0, turn: int = 0
) -> TurnOutcome:
    """Run a native turn's `tool_calls` entries; one record per entry, in order."""
    return await _execute(_plan([native_call(c) for c in tool_calls], ""), ctx, segment, turn)


async def _execute(planned: list[_Planned], ctx: ToolContext, segment: int, turn: int) -> TurnOutcome:
    limit = asyncio.Semaphore(ctx.config.max_parallel_calls)
    await asyncio.gather(*(_run_one(c, ctx, limit) for c in planned if c.impl is not None))
    records = []
    finish_message = None
    for c in planned:
        obs = c.observation
        assert obs is not None
        records.append(
            ToolCallRecord(
                segment=segment,
                turn=turn,
                index=c.index,
                tool=c.tool,
                args=_jsonable(c.args),
                observation=obs.text,
                error=obs.error,
                truncated=obs.truncated,
                duration_s=round(c.duration_s, 6),
            )
        )
        if c.tool == "finish" and c.impl is not None and not obs.error and finish_message is None:
            finish_message = str(c.args.get("message", ""))
    return TurnOutcome(records, finish_message)


def _jsonable(args: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v if isinstance(v, (str, int, float, bool)) or v is None else str(v) for k, v in args.items()}
