"""The fixed texts the loop renders: system prompt (tools + call format), task, observations, summary.

These strings are part of the product's behaviour (a model trained on them expects them), so they
are constants here, rendered the same way in `inhabit agent` and in training.
"""

from __future__ import annotations

from collections.abc import Iterable

from inhabit.harness.tools import TOOLS, Tool

SYSTEM_HEADER = """\
You are a coding agent working in a repository inside a sandbox. You act only through tools.

Call a tool by writing, anywhere in your reply:
<tool name="TOOL_NAME"><ARG_NAME>value</ARG_NAME><OTHER_ARG>value</OTHER_ARG></tool>

Rules of the format:
- A value is the raw text up to its closing tag: code with <, > and & needs no escaping. One
  newline right after the opening tag is dropped; everything else is kept exactly.
- If a value must contain its own closing tag (say </content>), wrap it: <content><![CDATA[...]]></content>.
- You may write several calls in one reply: they run at the same time and their observations come
  back in the order you wrote them. A call that depends on another's result belongs in a later
  reply. Do not write to the same file twice in one reply.
- Paths are relative to the repository root.
- When the work is done, call finish with a short message saying what you did.

Tools (? marks an optional argument):"""

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


def describe_tool(tool: Tool) -> str:
    lines = [f"- {tool.spec.signature()}: {tool.spec.description}"]
    lines += [f"    {a.name}{'' if a.required else '?'}: {a.description}" for a in tool.spec.args]
    return "\n".join(lines)


def system_prompt(tools: Iterable[Tool] | None = None) -> str:
    tools = list(TOOLS.values()) if tools is None else list(tools)
    return SYSTEM_HEADER + "\n" + "\n".join(describe_tool(t) for t in tools)


def task_prompt(instruction: str, summary: str | None = None) -> str:
    text = f"Task:\n{instruction.strip()}"
    if summary is not None:
        text += f"\n\n{SUMMARY_HEADER}\n{summary.strip()}"
    return text


def render_observation(index: int, tool: str | None, text: str, error: bool) -> str:
    name = tool if tool is not None else "?"
    status = ' status="error"' if error else ""
    return f'<observation index="{index}" tool="{name}"{status}>\n{text}\n</observation>'
