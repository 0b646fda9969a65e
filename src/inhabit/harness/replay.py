"""`ReplayPolicy`: plays an actions file (docs/architecture.md, "Actions file") in place of a model.

The file is JSON: a list of turns, each a list of `{"tool": NAME, "args": {...}}`. Each turn is
rendered as tool-call text (`parse.render_call`), so the real parser, argument checks, tools and
sandbox all run exactly as they do for a model. Argument values are rendered as text: strings as
they are, numbers as decimals, booleans as true/false, lists and objects as JSON. After the last
turn the policy calls finish. Summary requests are answered with a fixed line.

The file is format-free: in the native tool format (the harness passes `tools`) the same turns come
back as `PolicyTurn.tool_calls` entries (arguments as the file's JSON object) instead of text.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.errors import HarnessError
from inhabit.harness.parse import arg_text, render_call
from inhabit.harness.prompts import SUMMARY_PROMPT

FINISH_TEXT = render_call("finish", {"message": "replay finished"})


class ActionsFileError(HarnessError):
    """An actions file is not a JSON list of turns of {"tool", "args"} objects."""


def parse_actions(data: Any, source: str = "actions") -> list[list[tuple[str, dict[str, Any]]]]:
    """Validate the actions structure; ActionsFileError names the first bad place."""
    if not isinstance(data, list):
        raise ActionsFileError(f"{source}: expected a JSON list of turns, got {type(data).__name__}")
    turns = []
    for t, turn in enumerate(data):
        if not isinstance(turn, list):
            raise ActionsFileError(f"{source}: turn {t} must be a list of calls, got {type(turn).__name__}")
        calls = []
        for c, call in enumerate(turn):
            where = f"{source}: turn {t}, call {c}"
            if not isinstance(call, dict) or not isinstance(call.get("tool"), str):
                raise ActionsFileError(f'{where}: expected {{"tool": NAME, "args": {{...}}}}')
            args = call.get("args", {})
            if not isinstance(args, dict) or set(call) - {"tool", "args"}:
                raise ActionsFileError(f'{where}: only "tool" and an "args" object are allowed')
            calls.append((call["tool"], args))
        turns.append(calls)
    return turns


def render_turn(calls: Sequence[tuple[str, dict[str, Any]]]) -> str:
    try:
        return "\n".join(render_call(name, {k: arg_text(v) for k, v in args.items()}) for name, args in calls)
    except ValueError as e:
        raise ActionsFileError(f"cannot render call: {e}") from e


class ReplayPolicy(Policy):
    """Answers each turn with the next turn of an actions file."""

    context_window = 1_000_000

    def __init__(self, turns: list[list[tuple[str, dict[str, Any]]]]) -> None:
        self._texts = [render_turn(t) for t in turns]
        self._turns = turns
        self._next = 0

    @property
    def num_turns(self) -> int:
        return len(self._texts)

    @classmethod
    def from_file(cls, path: str | Path) -> ReplayPolicy:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError as e:
            raise ActionsFileError(f"actions file {path} does not exist") from e
        except IsADirectoryError as e:
            raise ActionsFileError(f"actions file {path} is a directory; pass the JSON file in it") from e
        except UnicodeDecodeError as e:
            raise ActionsFileError(
                f"actions file {path} is not UTF-8 text ({e.reason} at byte {e.start})"
            ) from e
        except OSError as e:
            raise ActionsFileError(f"cannot read actions file {path}: {e.strerror or e}") from e
        except json.JSONDecodeError as e:
            raise ActionsFileError(f"actions file {path} is not valid JSON: {e}") from e
        return cls(parse_actions(data, str(path)))

    def native_tools(self) -> bool | None:
        return None  # plays either format; `auto` keeps xml

    def summary_turn(self, tools: Sequence[dict[str, Any]] | None) -> PolicyTurn:
        """The answer to the harness's summary request (an actions file has none to give)."""
        return PolicyTurn(text="(replay: no summary)", tool_calls=None if tools is None else [])

    async def next_turn(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int,
        stop: Sequence[str] = (),
        tools: Sequence[dict[str, Any]] | None = None,
    ) -> PolicyTurn:
        if messages and messages[-1].content == SUMMARY_PROMPT:
            return self.summary_turn(tools)
        if self._next >= len(self._texts):
            text, calls = FINISH_TEXT, [("finish", {"message": "replay finished"})]
        else:
            text, calls = self._texts[self._next], self._turns[self._next]
            self._next += 1
        if tools is None:
            return PolicyTurn(text=text)
        wire = [
            {
                "id": f"call_{self._next}_{i}",
                "type": "function",
                "function": {"name": n, "arguments": json.dumps(a)},
            }
            for i, (n, a) in enumerate(calls)
        ]
        return PolicyTurn(text=text, tool_calls=wire, content="")

    def count_tokens(self, messages: Sequence[Message], tools: Sequence[dict] | None = None) -> int:
        extra = len(json.dumps(tools)) // 4 if tools else 0
        return extra + sum(len(m.content) // 4 + 4 for m in messages)
