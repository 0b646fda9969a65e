"""The fixed texts the loop renders: system prompt (tools + call format), task, observations, summary.

The native tool format gets the same instructions without the XML format section, and the tools
as JSON Schema (`tool_schemas`) built from the very specs the XML prompt lists.

These strings are part of the product's behaviour (a model trained on them expects them), so they
are constants here, rendered the same way in `inhabit agent` and in training.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from inhabit.harness.tools import TOOLS, Tool

INTRO = "You are a coding agent working in a repository inside a sandbox. You act only through tools."

# The product's rules, the same in both tool formats.
SHARED_RULES = """\
- You may write several calls in one reply: they run at the same time and their observations come
  back in the order you wrote them. A call that depends on another's result belongs in a later
  reply. Do not write to the same file twice in one reply.
- Paths are relative to the repository root.
- When the work is done, call finish with a short message saying what you did."""

# The XML format section: only the XML format's prompt holds it.
XML_FORMAT = """\
Call a tool by writing, anywhere in your reply:
<tool name="TOOL_NAME"><ARG_NAME>value</ARG_NAME><OTHER_ARG>value</OTHER_ARG></tool>

Rules of the format:
- A value is the raw text up to its closing tag: code with <, > and & needs no escaping. One
  newline right after the opening tag is dropped; everything else is kept exactly.
- If a value must contain its own closing tag (say </content>), wrap it: <content><![CDATA[...]]></content>."""

SYSTEM_HEADER = f"{INTRO}\n\n{XML_FORMAT}\n{SHARED_RULES}\n\nTools (? marks an optional argument):"

NATIVE_SYSTEM = f"{INTRO}\n\nRules:\n{SHARED_RULES}"
"""The native format's system prompt: the tools themselves reach the model as the chat template's
`tools` (`tool_schemas`), in the format it was trained on."""

SUMMARY_PROMPT = """\
Your context is nearly full, so it will be cleared. Write a summary that lets you continue the task \
from a fresh context holding only the task and this summary. Include: what you have learned about \
the code (files, functions, line numbers that matter), what you have changed so far, what you \
tried that failed, and the exact next steps. Do not call any tool in this reply."""

SUMMARY_HEADER = "Summary of your work so far (your earlier context was cleared):"

NO_CALL_TEXT = (
    'Your reply contained no tool call. Act with <tool name="NAME"><ARG>value</ARG></tool>, '
    'and call <tool name="finish"><message>...</message></tool> when you are done.'
)


NATIVE_NO_CALL_TEXT = (
    "Your reply contained no tool call that could be read. Act by calling one of the tools, with "
    "its arguments as one JSON object, and call finish when you are done."
)

_JSON_TYPES = {"text": "string", "line": "string", "int": "integer"}


def describe_tool(tool: Tool) -> str:
    lines = [f"- {tool.spec.signature()}: {tool.spec.description}"]
    lines += [f"    {a.name}{'' if a.required else '?'}: {a.description}" for a in tool.spec.args]
    return "\n".join(lines)


def system_prompt(tools: Iterable[Tool] | None = None) -> str:
    tools = list(TOOLS.values()) if tools is None else list(tools)
    return SYSTEM_HEADER + "\n" + "\n".join(describe_tool(t) for t in tools)


def tool_schemas(tools: Iterable[Tool] | None = None) -> list[dict[str, Any]]:
    """The tools as OpenAI function tools (JSON Schema), from the same specs the XML prompt lists."""
    out = []
    for tool in TOOLS.values() if tools is None else tools:
        props = {a.name: {"type": _JSON_TYPES[a.kind], "description": a.description} for a in tool.spec.args}
        required = [a.name for a in tool.spec.args if a.required]
        params: dict[str, Any] = {"type": "object", "properties": props, "required": required}
        out.append(
            {
                "type": "function",
                "function": {
                    "name": tool.spec.name,
                    "description": tool.spec.description,
                    "parameters": params,
                },
            }
        )
    return out


def task_prompt(instruction: str, summary: str | None = None) -> str:
    text = f"Task:\n{instruction.strip()}"
    if summary is not None:
        text += f"\n\n{SUMMARY_HEADER}\n{summary.strip()}"
    return text


def render_observation(index: int, tool: str | None, text: str, error: bool) -> str:
    name = tool if tool is not None else "?"
    status = ' status="error"' if error else ""
    return f'<observation index="{index}" tool="{name}"{status}>\n{text}\n</observation>'


def render_observations(records: Sequence[Any]) -> str:
    """The user message after an xml-format action turn: each call's observation in call order
    (records with index, tool, observation and error: `ToolCallRecord`), or the nudge when the
    turn made no call."""
    if not records:
        return NO_CALL_TEXT
    return "\n".join(render_observation(r.index + 1, r.tool, r.observation, r.error) for r in records)


def render_native_observation(text: str, error: bool) -> str:
    """The content of a native `tool` message (the template adds its own wrapping)."""
    return f"Error: {text}" if error else text
