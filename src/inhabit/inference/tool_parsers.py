"""Tool-call parsers: a model's generated text into OpenAI `tool_calls`, one parser per model family.

Names follow vLLM's `--tool-call-parser` where the format is the same:

- `hermes` (Qwen2.5, Qwen3): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`,
  repeated for parallel calls.
- `qwen3_coder` (Qwen3-Coder): `<tool_call>\\n<function=NAME>\\n<parameter=ARG>\\nvalue\\n</parameter>
  ...</function>\\n</tool_call>`; values are text, converted by the tool's JSON Schema type.
- `llama3_json` (Llama 3.x): the whole output is `{"name": ..., "parameters": {...}}` (optionally
  after `<|python_tag|>`), several joined by `;`.
- `inhabit`: the harness's own `<tool name="NAME"><ARG>value</ARG></tool>` (harness/parse.py).

Nothing here raises on model text: whatever a parser cannot turn into a call stays in `content`.
A call is accepted only when it is complete (its closing tag written, its JSON whole), so parsing a
prefix of an output never yields a call that the full output would not.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

PARSERS = ("hermes", "qwen3_coder", "llama3_json", "inhabit")


@dataclass(frozen=True)
class ParsedCall:
    """One call: the tool's name and its arguments as a JSON object text."""

    name: str
    arguments: str
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")

    def wire(self) -> dict:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


@dataclass(frozen=True)
class Parsed:
    """`content`: the text outside accepted calls, unstripped (joined in order); `calls`: in order."""

    content: str
    calls: list[ParsedCall]


class ToolParser:
    """Base: `parse(text)`; streaming holds text back from the first `start` marker on."""

    name = ""
    start = ""  # the text a call begins with (content before it can be streamed)
    end = ""  # the text a call ends with ("" when only the full output tells)

    def __init__(self, tools: Mapping[str, Mapping[str, Any]] | None = None) -> None:
        self.schemas = dict(tools or {})  # tool name -> its `parameters` JSON Schema

    def parse(self, text: str) -> Parsed:
        raise NotImplementedError

    def call_start(self, text: str) -> tuple[int, int]:
        """(where a call begins in `text` or -1, how many trailing characters to hold back)."""
        return text.find(self.start), _partial_suffix(text, self.start)


def _dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


_DECODER = json.JSONDecoder()


class HermesParser(ToolParser):
    name, start, end = "hermes", "<tool_call>", "</tool_call>"

    def parse(self, text: str) -> Parsed:
        content, calls, pos = [], [], 0
        while (i := text.find(self.start, pos)) >= 0:
            got = self._one(text, i + len(self.start))
            if got is None:  # malformed: the marker stays text; look for the next one after it
                content.append(text[pos : i + len(self.start)])
                pos = i + len(self.start)
                continue
            call, after = got
            content.append(text[pos:i])
            calls.append(call)
            pos = after
        content.append(text[pos:])
        return Parsed("".join(content), calls)

    def _one(self, text: str, j: int) -> tuple[ParsedCall, int] | None:
        j = len(text) - len(text[j:].lstrip())
        try:  # raw_decode, not a regex: a string argument may hold "</tool_call>" itself
            obj, k = _DECODER.raw_decode(text, j)
        except json.JSONDecodeError:
            return None
        k = len(text) - len(text[k:].lstrip())
        if not text.startswith(self.end, k):
            return None
        call = _call_from_object(obj)
        return None if call is None else (call, k + len(self.end))


def _call_from_object(obj: Any) -> ParsedCall | None:
    """`{"name", "arguments" | "parameters"}` as a call; None when it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as a JSON string
        try:
            args = json.loads(args)
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return ParsedCall(obj["name"], _dumps(args))


class Qwen3CoderParser(ToolParser):
    name, start, end = "qwen3_coder", "<tool_call>", "</tool_call>"
    _CALL = re.compile(r"<tool_call>\s*<function=([^>\n]+)>(.*?)</function>\s*</tool_call>", re.S)
    _PARAM = re.compile(r"<parameter=([^>\n]+)>(.*?)</parameter>", re.S)

    def parse(self, text: str) -> Parsed:
        content, calls, pos = [], [], 0
        for m in self._CALL.finditer(text):
            name, body = m.group(1).strip(), m.group(2)
            args = {}
            for p in self._PARAM.finditer(body):
                value = p.group(2)
                value = value[1:] if value.startswith("\n") else value
                value = value[:-1] if value.endswith("\n") else value
                args[p.group(1).strip()] = _typed(value, self._prop(name, p.group(1).strip()))
            if self._PARAM.sub("", body).strip():  # stray text between parameters: not a call
                continue
            content.append(text[pos : m.start()])
            calls.append(ParsedCall(name, _dumps(args)))
            pos = m.end()
        content.append(text[pos:])
        return Parsed("".join(content), calls)

    def _prop(self, tool: str, arg: str) -> Mapping[str, Any]:
        props = (self.schemas.get(tool) or {}).get("properties") or {}
        return props.get(arg) or {}


def _typed(value: str, schema: Mapping[str, Any]) -> Any:
    """A text value as the JSON type its schema names (text kept when it does not convert)."""
    kinds = schema.get("type", "string")
    kinds = [kinds] if isinstance(kinds, str) else list(kinds)
    if "string" in kinds or not kinds:
        return value
    stripped = value.strip()
    if stripped == "null" and "null" in kinds:
        return None
    try:
        if "integer" in kinds and re.fullmatch(r"-?\d+", stripped):
            return int(stripped)
        if "number" in kinds:
            return float(stripped) if re.search(r"[.eE]", stripped) else int(stripped)
        if "boolean" in kinds and stripped.lower() in ("true", "false"):
            return stripped.lower() == "true"
        if {"object", "array"} & set(kinds):
            return json.loads(stripped)
    except ValueError:
        pass
    return value


class Llama3JsonParser(ToolParser):
    name, start, end = "llama3_json", "", ""
    _TAG = "<|python_tag|>"

    def call_start(self, text: str) -> tuple[int, int]:
        # Llama 3 writes a call as the whole output: hold it once it opens like JSON (or the tag).
        stripped = text.lstrip()
        if not stripped or stripped[0] == "{" or self._TAG.startswith(stripped[: len(self._TAG)]):
            return 0, 0
        return -1, 0

    def parse(self, text: str) -> Parsed:
        body = text.strip()
        body = body[len(self._TAG) :].lstrip() if body.startswith(self._TAG) else body
        calls, j = [], 0
        while j < len(body):
            try:
                obj, j = _DECODER.raw_decode(body, j)
            except json.JSONDecodeError:
                return Parsed(text, [])
            call = _call_from_object(obj)
            if call is None:
                return Parsed(text, [])
            calls.append(call)
            j = len(body) - len(body[j:].lstrip())
            if body.startswith(";", j):
                j = len(body) - len(body[j + 1 :].lstrip())
            elif j < len(body):
                return Parsed(text, [])
        return Parsed("", calls) if calls else Parsed(text, [])


class InhabitParser(ToolParser):
    name, start, end = "inhabit", "<tool", "</tool>"

    def parse(self, text: str) -> Parsed:
        from inhabit.harness.parse import ToolCall, parse_tool_calls

        content, calls, pos = [], [], 0
        for item in parse_tool_calls(text):
            if not isinstance(item, ToolCall):
                continue  # a problem: its text stays in content
            props = (self.schemas.get(item.name) or {}).get("properties") or {}
            args = {k: _typed(v, props.get(k) or {}) for k, v in item.args.items()}
            content.append(text[pos : item.start])
            calls.append(ParsedCall(item.name, _dumps(args)))
            pos = item.end
        content.append(text[pos:])
        return Parsed("".join(content), calls)


_CLASSES: dict[str, type[ToolParser]] = {
    c.name: c for c in (HermesParser, Qwen3CoderParser, Llama3JsonParser, InhabitParser)
}


def make_parser(name: str, tools: Mapping[str, Mapping[str, Any]] | None = None) -> ToolParser:
    if name not in _CLASSES:
        raise ValueError(f"unknown tool-call parser {name!r}; choose one of {', '.join(PARSERS)}")
    return _CLASSES[name](tools)


def detect_parser(chat_template: str | None) -> str | None:
    """The parser a chat template's own tool format needs, when the template says so unambiguously."""
    from inhabit.models.tokenizer import CHAT_TEMPLATE

    if not isinstance(chat_template, str):
        return None
    if chat_template == CHAT_TEMPLATE:
        return "inhabit"
    if "<tool_call>" in chat_template:
        return "qwen3_coder" if "<function=" in chat_template else "hermes"
    if "<|python_tag|>" in chat_template or ('"parameters"' in chat_template and "ipython" in chat_template):
        return "llama3_json"
    return None


class StreamingToolText:
    """Feeds a growing output; says what content is safe to send and which calls are complete.

    Content before the first `start` marker streams as it comes (a suffix that could begin the
    marker is held back); from the marker on, text is held and re-parsed whenever another `end`
    marker appears, so each call goes out once complete. `finish()` parses the full output.
    """

    def __init__(self, parser: ToolParser, max_calls: int | None = None) -> None:
        self.parser, self.max_calls = parser, max_calls
        self.sent_content, self.sent_calls = "", 0
        self._holding = False
        self._ends = 0

    def feed(self, text: str) -> tuple[str, list[ParsedCall]]:
        """(new content, newly complete calls) for the output so far."""
        if not self._holding:
            i, hold = self.parser.call_start(text)
            # Trailing whitespace waits for what follows: before a call the whole answer drops it
            # (assistant_message strips content around calls), so the stream must not send it.
            if i < 0:
                return self._content(text[: len(text) - hold].rstrip()), []
            self._holding = True
            new = self._content(text[:i].rstrip())
        else:
            new = ""
        if not self.parser.end or text.count(self.parser.end) == self._ends:
            return new, []
        self._ends = text.count(self.parser.end)
        return new, self._calls(self.parser.parse(text).calls)

    def finish(self, text: str) -> tuple[str, list[ParsedCall]]:
        parsed = self.parser.parse(text)
        rest = (
            parsed.content[len(self.sent_content) :] if parsed.content.startswith(self.sent_content) else ""
        )
        calls = self._calls(parsed.calls)
        if self.sent_calls and not rest.strip():  # the newlines between calls: not content
            rest = ""
        return rest, calls

    def _content(self, safe: str) -> str:
        if len(safe) > len(self.sent_content) and safe.startswith(self.sent_content):
            new, self.sent_content = safe[len(self.sent_content) :], safe
            return new
        return ""

    def _calls(self, calls: list[ParsedCall]) -> list[ParsedCall]:
        limit = len(calls) if self.max_calls is None else min(len(calls), self.max_calls)
        new = calls[self.sent_calls : limit]
        self.sent_calls = max(self.sent_calls, limit)
        return new


def _partial_suffix(text: str, marker: str) -> int:
    """Length of the longest suffix of `text` that is a proper prefix of `marker`."""
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
