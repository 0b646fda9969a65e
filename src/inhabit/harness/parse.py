"""Parse the XML-like tool calls in a model's free text, and render calls back to that text.

The format (docs/architecture.md, "The ten tools"):

    <tool name="read_file"><path>calc.py</path><start_line>10</start_line></tool>

Escaping rule (no entity decoding, ever: `&lt;` stays the four characters `&lt;`):

* An argument's value is the raw text between `<arg>` and the FIRST `</arg>` with the same name
  after it. Code may hold `<`, `>`, `&`, quotes, newlines and even `</tool>` or other tags.
* One newline directly after `<arg>` is dropped (so a value can start on its own line); every
  other character, trailing newlines included, is kept exactly.
* A value that must contain its own closing tag `</arg>` is written as CDATA:
  `<content><![CDATA[ ... ]]></content>`, taken verbatim (no newline dropped). A `]]>` inside
  it is split across two adjacent sections: `]]]]><![CDATA[>`. Adjacent sections concatenate.
* `<tool name="finish"/>` (self-closing) is a call with no arguments.

This module is schema-free: it returns names and string values. Checking them against the ten
tools (unknown tools, missing or extra arguments, integer arguments) is `tools.base.bind_args`.
Nothing here raises on model text: every problem becomes a `ParseProblem` whose message tells the
model what was wrong.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

_TOOL_OPEN = re.compile(r"<tool\b")
_NAME_ATTR = re.compile(r"""\s+name\s*=\s*(?:"([^"]*)"|'([^']*)')\s*""")
_ARG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ARG_OPEN = re.compile(r"<([A-Za-z_][A-Za-z0-9_]*)>")
_WS = re.compile(r"\s*")
_CDATA_OPEN = "<![CDATA["
_CDATA_CLOSE = "]]>"
_TOOL_CLOSE = "</tool>"

FORMAT_HINT = 'Write calls as <tool name="NAME"><ARG>value</ARG></tool>.'


@dataclass(frozen=True)
class ToolCall:
    """One well-formed call: a tool name and its raw string arguments, in written order."""

    name: str
    args: Mapping[str, str] = field(default_factory=dict)
    start: int = 0
    end: int = 0


@dataclass(frozen=True)
class ParseProblem:
    """A call that could not be read; `message` is written for the model."""

    message: str
    name: str | None = None
    start: int = 0


class _Malformed(Exception):
    def __init__(self, message: str, resume: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.resume = resume


def parse_tool_calls(text: str) -> list[ToolCall | ParseProblem]:
    """Every `<tool ...>` in `text`, in written order, as a call or as a problem."""
    results: list[ToolCall | ParseProblem] = []
    pos = 0
    while True:
        m = _TOOL_OPEN.search(text, pos)
        if m is None:
            return results
        name: list[str | None] = [None]
        try:
            call = _parse_call(text, m.start(), m.end(), name)
        except _Malformed as e:
            results.append(ParseProblem(e.message, name=name[0], start=m.start()))
            pos = e.resume if e.resume is not None and e.resume > m.start() else m.end()
        else:
            results.append(call)
            pos = call.end


def _parse_call(text: str, start: int, i: int, name_out: list[str | None]) -> ToolCall:
    m = _NAME_ATTR.match(text, i)
    if m is None:
        raise _Malformed(f'a <tool> tag must name its tool: <tool name="NAME">. {FORMAT_HINT}')
    name = m.group(1) if m.group(1) is not None else m.group(2)
    name_out[0] = name
    j = m.end()
    if text.startswith("/>", j):
        return ToolCall(name, {}, start, j + 2)
    if not text.startswith(">", j):
        raise _Malformed(
            f"the <tool name=\"{name}\"> tag is not closed by '>' right after its name attribute."
        )
    j += 1
    args: dict[str, str] = {}
    while True:
        j = _WS.match(text, j).end()  # type: ignore[union-attr]
        if text.startswith(_TOOL_CLOSE, j):
            return ToolCall(name, args, start, j + len(_TOOL_CLOSE))
        if j >= len(text):
            raise _Malformed(f'the call to "{name}" is not closed with </tool>.')
        if _TOOL_OPEN.match(text, j):
            raise _Malformed(
                f'the call to "{name}" is not closed with </tool> before the next <tool>.', resume=j
            )
        am = _ARG_OPEN.match(text, j)
        if am is None:
            snippet = text[j : j + 40].replace("\n", "\\n")
            raise _Malformed(
                f'unexpected text inside the call to "{name}": {snippet!r}. Only <ARG>value</ARG> '
                f"elements may appear between <tool ...> and </tool>. {FORMAT_HINT}"
            )
        arg = am.group(1)
        value, j = _parse_value(text, am.end(), arg, name)
        if arg in args:
            raise _Malformed(f'the call to "{name}" gives the argument <{arg}> twice.')
        args[arg] = value


def _parse_value(text: str, j: int, arg: str, tool: str) -> tuple[str, int]:
    closing = f"</{arg}>"
    if text.startswith(_CDATA_OPEN, j):
        parts: list[str] = []
        while text.startswith(_CDATA_OPEN, j):
            k = text.find(_CDATA_CLOSE, j + len(_CDATA_OPEN))
            if k < 0:
                raise _Malformed(
                    f'in the call to "{tool}", a <![CDATA[ section of <{arg}> is never closed by ]]>.'
                )
            parts.append(text[j + len(_CDATA_OPEN) : k])
            j = k + len(_CDATA_CLOSE)
        j = _WS.match(text, j).end()  # type: ignore[union-attr]
        if not text.startswith(closing, j):
            raise _Malformed(
                f'in the call to "{tool}", the CDATA value of <{arg}> must be followed by {closing}.'
            )
        return "".join(parts), j + len(closing)
    k = text.find(closing, j)
    if k < 0:
        raise _Malformed(f'in the call to "{tool}", <{arg}> is never closed by {closing}.')
    value = text[j:k]
    if value.startswith("\n"):
        value = value[1:]
    return value, k + len(closing)


def render_value(arg: str, value: str) -> str:
    """`<arg>value</arg>` such that parsing gives `value` back exactly."""
    closing = f"</{arg}>"
    if closing in value or value.startswith(_CDATA_OPEN):
        body = _CDATA_OPEN + value.replace(_CDATA_CLOSE, "]]]]><![CDATA[>") + _CDATA_CLOSE
        return f"<{arg}>{body}{closing}"
    if value.startswith("\n"):
        value = "\n" + value  # the parser drops one leading newline
    return f"<{arg}>{value}{closing}"


def render_call(name: str, args: Mapping[str, str]) -> str:
    """The text of one call; `parse_tool_calls(render_call(n, a))` gives back `n` and `a`."""
    if '"' in name and "'" in name:
        raise ValueError(f"a tool name cannot hold both quote characters: {name!r}")
    for arg in args:
        if not _ARG_NAME.fullmatch(arg):
            raise ValueError(f"argument names are identifiers ([A-Za-z_][A-Za-z0-9_]*), not {arg!r}")
    quoted = f"'{name}'" if '"' in name else f'"{name}"'
    inner = "".join(render_value(k, v) for k, v in args.items())
    return f"<tool name={quoted}>{inner}</tool>"


def arg_text(value: Any) -> str:
    """A JSON argument value as the text a tool receives (every tool argument is text, as in the
    XML-like format): strings as they are, JSON's true/false and numbers as written, else JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value)
