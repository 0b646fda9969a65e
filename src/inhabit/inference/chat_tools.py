"""Chat requests with tools: check them, render them through the model's chat template, and turn
the generated text back into OpenAI `tool_calls`.

A request is planned once (`plan_chat`): messages become the dicts transformers' chat templates
take (`developer` read as `system`, text parts joined, assistant `tool_calls` with their arguments
as objects, `tool` messages with their `tool_call_id`), `tools` become the template's `tools`, and
`tool_choice` picks the parser:

- `none`, or no tools: nothing is parsed, the output is all `content` (never `tool_calls`);
- `auto`: the output is parsed with the server's parser; calls go to `message.tool_calls`;
- `required` / a named function: decoding is constrained (constrained.py) to one call (or, with
  parallel calls allowed, one or more) to those functions, arguments matching their schemas, in
  the parser's JSON call format (hermes, llama3_json; other formats answer 400);
- `response_format` json_object / json_schema: decoding is constrained to that JSON (the guide
  goes on the plan; a forced tool call takes precedence).
- `parallel_tool_calls: false` keeps the first call only (the token ids still hold them all).
- a function's `strict` is not rendered, and enforced only when the call is forced: under
  `auto`, arguments are parsed as written and may not match the schema.

Every problem in the request is a `BadChatRequest` (the server answers 400 with its `param`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from inhabit.inference.constrained import Guide, response_format_guide, tool_call_guide
from inhabit.inference.errors import InvalidRequest
from inhabit.inference.protocol import ChatRequest, NamedToolChoice
from inhabit.inference.reasoning import ReasoningSplit, make_reasoning
from inhabit.inference.tool_parsers import PARSERS, ToolParser, make_parser


class BadChatRequest(InvalidRequest):
    """A chat request the server refuses with 400; `param` names the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class ChatPlan:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None  # as the chat template takes them
    parser: ToolParser | None  # None: the output is all content
    max_calls: int | None
    uses_tools: bool  # tools, tool calls or tool messages: rendered through the template's tool parts
    guide: Guide | None = None  # constrained decoding: response_format, or a forced tool call
    reasoning: ReasoningSplit | None = None  # set once the prompt is rendered (reasoning.py)


def plan_chat(req: ChatRequest, parser_name: str | None, xml_tools: bool = False) -> ChatPlan:
    """Check and plan `req`. `xml_tools`: under the `inhabit` parser (a template that renders no
    tools), describe `tools` in the system message in inhabit's XML call format instead of a 400."""
    schemas = _check_tools(req)
    choice = req.tool_choice or ("auto" if req.tools else "none")
    if isinstance(choice, NamedToolChoice) and choice.function.name not in schemas:
        raise BadChatRequest(
            f"tool_choice names {choice.function.name!r}, which is not among the request's tools "
            f"({', '.join(schemas) or 'none given'})",
            "tool_choice",
        )
    if choice == "required" and not req.tools:
        raise BadChatRequest('tool_choice "required" needs `tools`', "tool_choice")
    messages = _messages(req)
    uses = bool(req.tools) or any(m.get("tool_calls") or m["role"] == "tool" for m in messages)
    if uses and parser_name is None:
        raise BadChatRequest(
            "this server reads no tool calls for this model (its chat template names no known tool "
            f"format): start `inhabit serve` with --tool-call-parser ({', '.join(PARSERS)})",
            "tools",
        )
    if uses and parser_name == "inhabit":
        if req.tools and choice != "none" and not xml_tools:
            raise BadChatRequest(
                "this model's chat template does not render `tools`, so the model would never see "
                "them: describe them in the system message in inhabit's XML call format, or start "
                "`inhabit serve --xml-tools` to have the server do so",
                "tools",
            )
        messages = _inhabit_messages(messages)
        if req.tools and choice != "none":
            messages = _with_xml_tools(messages, [t.function for t in req.tools])
    parser = make_parser(parser_name, schemas) if req.tools and choice != "none" and parser_name else None
    # `strict` asks OpenAI to constrain decoding to the schema; it describes nothing to the model
    # and is not enforced here, so it is not rendered (arguments are parsed as written).
    tools = (
        [t.model_dump(exclude_none=True, exclude={"function": {"strict"}}) for t in req.tools]
        if req.tools
        else None
    )
    guide = None
    try:
        if choice == "required" or isinstance(choice, NamedToolChoice):
            names = [choice.function.name] if isinstance(choice, NamedToolChoice) else list(schemas)
            guide = tool_call_guide(tools or [], names, parser_name, req.parallel_tool_calls)
        else:
            guide = response_format_guide(req.response_format)
    except ValueError as e:
        param = (
            "tool_choice"
            if choice == "required" or isinstance(choice, NamedToolChoice)
            else "response_format"
        )
        raise BadChatRequest(str(e), param) from None
    # Under the `inhabit` parser the template renders no tools: they are described in the system
    # message (above), so the template is rendered without them.
    template_tools = None if parser_name == "inhabit" else tools
    return ChatPlan(messages, template_tools, parser, None if req.parallel_tool_calls else 1, uses, guide)


def _check_tools(req: ChatRequest) -> dict[str, dict]:
    from jsonschema import SchemaError, validators

    schemas: dict[str, dict] = {}
    for i, tool in enumerate(req.tools or []):
        fn = tool.function
        if fn.name in schemas:
            raise BadChatRequest(f"tools[{i}] repeats the function name {fn.name!r}", f"tools.{i}")
        params = fn.parameters if fn.parameters is not None else {"type": "object", "properties": {}}
        try:
            validators.validator_for(params).check_schema(params)
        except SchemaError as e:
            raise BadChatRequest(
                f"tools[{i}].function.parameters is not a valid JSON Schema: {e.message}",
                f"tools.{i}.function.parameters",
            ) from None
        if params.get("type", "object") != "object":
            raise BadChatRequest(
                f"tools[{i}].function.parameters must describe an object (type: object)",
                f"tools.{i}.function.parameters",
            )
        schemas[fn.name] = params
    return schemas


def _messages(req: ChatRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    call_ids: set[str] = set()
    for i, m in enumerate(req.messages):
        if isinstance(m.content, list):
            for j, part in enumerate(m.content):
                if part.type != "text" or part.text is None:
                    raise BadChatRequest(
                        f"messages[{i}].content[{j}] is a {part.type!r} part; this server reads text "
                        "parts only ({'type': 'text', 'text': ...})",
                        f"messages.{i}.content.{j}",
                    )
        if m.content is None and not (m.role == "assistant" and m.tool_calls):
            raise BadChatRequest(
                f"messages[{i}] has no content; only an assistant message with tool_calls may omit it",
                f"messages.{i}.content",
            )
        d: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": m.text()}
        if m.role == "assistant" and m.reasoning_content:
            d["reasoning_content"] = m.reasoning_content
        if m.role == "assistant" and m.tool_calls:
            d["tool_calls"] = [_call(i, j, c) for j, c in enumerate(m.tool_calls)]
            call_ids.update(c.id for c in m.tool_calls)
        elif m.tool_calls:
            raise BadChatRequest(f"messages[{i}] is a {m.role} message with tool_calls", f"messages.{i}")
        if m.role == "tool":
            if m.tool_call_id not in call_ids:
                raise BadChatRequest(
                    f"messages[{i}] is a tool message answering tool_call_id {m.tool_call_id!r}, which "
                    "no earlier assistant message's tool_calls holds",
                    f"messages.{i}.tool_call_id",
                )
            d["tool_call_id"] = m.tool_call_id
            if m.name:
                d["name"] = m.name
        out.append(d)
    return out


def _call(i: int, j: int, c: Any) -> dict[str, Any]:
    param = f"messages.{i}.tool_calls.{j}.function.arguments"
    try:
        args = json.loads(c.function.arguments)
    except json.JSONDecodeError as e:
        raise BadChatRequest(
            f"messages[{i}].tool_calls[{j}].function.arguments is not JSON: {e}", param
        ) from None
    if not isinstance(args, dict):
        raise BadChatRequest(f"messages[{i}].tool_calls[{j}].function.arguments must be a JSON object", param)
    # Templates take arguments as objects (Qwen's and Llama's render them with `tojson`).
    return {"id": c.id, "type": "function", "function": {"name": c.function.name, "arguments": args}}


def _inhabit_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The harness's own format: calls written as `<tool ...>` text, results as user messages."""
    from inhabit.harness.parse import render_call

    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = "".join(
                render_call(
                    c["function"]["name"],
                    {
                        k: v if isinstance(v, str) else json.dumps(v)
                        for k, v in c["function"]["arguments"].items()
                    },
                )
                for c in m["tool_calls"]
            )
            out.append({"role": "assistant", "content": m["content"] + calls})
        elif m["role"] == "tool":
            out.append({"role": "user", "content": m["content"]})
        else:
            out.append(m)
    return out


def _with_xml_tools(messages: list[dict[str, Any]], functions: list[Any]) -> list[dict[str, Any]]:
    """`messages` with the tools described, in inhabit's XML call format, at the end of the system
    message (a new one first if there is none)."""
    lines = [
        'Call a tool by writing <tool name="NAME"><ARG>value</ARG></tool> (one element per '
        "argument); several calls in one turn run in parallel. Tools:"
    ]
    for fn in functions:
        params = fn.parameters or {"type": "object", "properties": {}}
        lines.append(f"- {fn.name}: {fn.description or ''} arguments (JSON Schema): {json.dumps(params)}")
    text = "\n".join(lines)
    if messages and messages[0]["role"] == "system":
        first = dict(messages[0], content=f"{messages[0]['content']}\n\n{text}")
        return [first, *messages[1:]]
    return [{"role": "system", "content": text}, *messages]


def check_servable(tokenizer: Any, parser_setting: str | None) -> str | None:
    """The tool-call parser `inhabit serve` will use for this tokenizer, or `ServeRefused` (one
    line) for a folder without a chat template, or an explicit parser the template contradicts:
    one that reads a different call format than the template writes, or a JSON format that a
    template which renders no `tools` would never show the model."""
    from inhabit.inference.errors import ServeRefused
    from inhabit.inference.tool_parsers import detect_parser

    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise ServeRefused(
            "the model folder has no chat template (chat_template.jinja or tokenizer_config.json's "
            "chat_template), so no chat request can be rendered: add one to the folder"
        )
    detected = detect_parser(template)
    if parser_setting in (None, "auto", "none"):
        return detected if parser_setting == "auto" else None
    if detected is not None and detected != parser_setting:
        raise ServeRefused(
            f"the chat template writes {detected} tool calls, which --tool-call-parser "
            f"{parser_setting} cannot read: use --tool-call-parser {detected} (or auto)"
        )
    if parser_setting != "inhabit" and not _renders_tools(tokenizer):
        raise ServeRefused(
            f"the chat template does not render `tools`, so a model served with --tool-call-parser "
            f"{parser_setting} would never see them: use --tool-call-parser inhabit with --xml-tools, "
            "or a template that renders tools"
        )
    return parser_setting


def _renders_tools(tokenizer: Any) -> bool:
    try:
        text = tokenizer.apply_chat_template(
            _PROBE, tools=_PROBE_TOOLS, add_generation_prompt=True, tokenize=False
        )
    except Exception:  # a template that refuses the probe renders no tools
        return False
    return "inhabit_probe_tool" in text


def encode_plan(tokenizer: Any, plan: ChatPlan) -> list[int]:
    """The prompt's token ids: the project's guarded encoding, or the template rendered with tools."""
    from jinja2 import TemplateError

    from inhabit.models.tokenizer import CHAT_TEMPLATE, encode_chat

    if not plan.uses_tools or getattr(tokenizer, "chat_template", None) == CHAT_TEMPLATE:
        return encode_chat(tokenizer, plan.messages)
    try:
        text = tokenizer.apply_chat_template(
            plan.messages, tools=plan.tools, add_generation_prompt=True, tokenize=False
        )
        if plan.tools and text == tokenizer.apply_chat_template(
            plan.messages, add_generation_prompt=True, tokenize=False
        ):
            raise BadChatRequest(
                "this model's chat template does not render `tools`, so the model would never see them",
                "tools",
            )
    except TemplateError as e:
        raise BadChatRequest(f"the model's chat template refused these messages: {e}", "messages") from None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def assistant_message(plan: ChatPlan, text: str, finish: str) -> tuple[dict[str, Any], str]:
    """(the choice's `message`, its finish_reason) for a generated `text`; with a reasoning parser
    the reasoning goes to `reasoning_content` and only the rest is parsed for calls."""
    extra: dict[str, Any] = {}
    if plan.reasoning is not None:
        reasoning, text = plan.reasoning.split(text)
        extra = {"reasoning_content": reasoning}
    if plan.parser is None:
        return {"role": "assistant", "content": text} | extra, finish
    parsed = plan.parser.parse(text)
    calls = parsed.calls[: plan.max_calls]
    if not calls:
        return {"role": "assistant", "content": text} | extra, finish
    content = parsed.content.strip() or None
    msg = {"role": "assistant", "content": content, "tool_calls": [c.wire() for c in calls]} | extra
    return msg, "tool_calls" if finish == "stop" else finish


def attach_reasoning(plan: ChatPlan, parser_name: str | None, tokenizer: Any, prompt: list[int]) -> None:
    """Give `plan` the reasoning split of `parser_name` (None: none), knowing whether the rendered
    prompt leaves a reasoning block open (templates that write the opening tag themselves)."""
    if parser_name is None:
        return
    fmt = make_reasoning(parser_name)
    tail = tokenizer.decode(prompt[-32:], skip_special_tokens=False)
    plan.reasoning = ReasoningSplit(fmt, opened_in_prompt=tail.rfind(fmt.start) > tail.rfind(fmt.end))


# --------------------------------------------------------------------- the harness's native format
_PROBE = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
_PROBE_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "inhabit_probe_tool",
            "description": "probe",
            "parameters": {"type": "object", "properties": {}},
        },
    }
]


def template_parser(tokenizer: Any) -> str | None:
    """The parser of the tool format a tokenizer's chat template speaks, when the template renders
    `tools` and names a format inhabit reads (`detect_parser`); None otherwise (the project's own
    template, which renders no tools, included)."""
    from inhabit.inference.tool_parsers import detect_parser

    name = detect_parser(getattr(tokenizer, "chat_template", None))
    if name is None or name == "inhabit":
        return None
    try:
        text = tokenizer.apply_chat_template(
            _PROBE, tools=_PROBE_TOOLS, add_generation_prompt=True, tokenize=False
        )
    except Exception:  # a template that refuses the probe cannot be driven natively
        return None
    return name if "inhabit_probe_tool" in text else None


def message_dicts(messages: Any) -> list[dict[str, Any]]:
    """Harness `Message`s as the dicts chat templates take (`tokenizer.to_chat_dicts`: assistant
    `tool_calls` with their arguments as objects, `tool` messages with `tool_call_id` and `name`).
    SFT renders transcripts through the same function, so it trains on the prompts rollouts saw."""
    from inhabit.models.tokenizer import to_chat_dicts

    return to_chat_dicts(messages)


def encode_native(tokenizer: Any, messages: Any, tools: list[dict[str, Any]] | None) -> list[int]:
    """Prompt ids for the next assistant turn, rendered by the model's own template with `tools`."""
    text = tokenizer.apply_chat_template(
        message_dicts(messages), tools=tools, add_generation_prompt=True, tokenize=False
    )
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])
