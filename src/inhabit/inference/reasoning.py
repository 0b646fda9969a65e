"""Reasoning parsers: a thinking model's `<think>...</think>` kept apart from its answer.

`inhabit serve --reasoning-parser qwen3|deepseek_r1` splits each answer into `reasoning_content`
(Chat Completions, streamed as `delta.reasoning_content`) or a `reasoning` item (Responses), and
the content after the closing tag, which alone goes to the tool-call parser. Both families write
`<think>` ... `</think>`; they differ on an answer with no closing tag:

| parser | opening tag | no `</think>` in the answer |
|---|---|---|
| `qwen3` | written by the model, or left open at the end of the prompt by the template | reasoning if it was opened (cut by `max_tokens`), else all content (thinking off) |
| `deepseek_r1` | usually the template's (the prompt ends with `<think>\\n`) | all reasoning (the model never closed it) |

The content after `</think>` loses its leading whitespace (the template's "\\n\\n"), streamed or
not, so both give the same text. A registry of two: a new family is a class and one entry.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReasoningFormat:
    """How one model family marks its reasoning."""

    name: str
    start: str = "<think>"
    end: str = "</think>"
    unclosed_is_reasoning: bool = False  # an answer without `end`: reasoning even if never opened


PARSERS = {
    "qwen3": ReasoningFormat("qwen3"),
    "deepseek_r1": ReasoningFormat("deepseek_r1", unclosed_is_reasoning=True),
}


def make_reasoning(name: str) -> ReasoningFormat:
    if name not in PARSERS:
        raise ValueError(f"unknown reasoning parser {name!r}; choose one of {', '.join(PARSERS)}")
    return PARSERS[name]


class ReasoningSplit:
    """One answer's split; `opened_in_prompt`: the rendered prompt ends inside an open `start`."""

    def __init__(self, fmt: ReasoningFormat, opened_in_prompt: bool = False) -> None:
        self.fmt, self.opened = fmt, opened_in_prompt
        self.sent_reasoning = ""

    def split(self, text: str) -> tuple[str | None, str]:
        """(reasoning or None, content) of a whole answer."""
        f = self.fmt
        head, sep, tail = text.partition(f.end)
        body = head.lstrip()
        opened = self.opened or body.startswith(f.start)
        if body.startswith(f.start):
            body = body[len(f.start) :]
        if sep:
            return body.strip() or None, tail.lstrip()
        if opened or f.unclosed_is_reasoning:
            return body.strip() or None, ""
        return None, text

    def feed(self, text: str) -> tuple[str, str | None]:
        """For the answer so far: (new reasoning to send, the content so far, or None while the
        answer is still reasoning). A suffix that could begin `end` is held back."""
        f = self.fmt
        head, sep, tail = text.partition(f.end)
        body = head.lstrip()
        if not sep and not self.opened and not f.unclosed_is_reasoning:
            if not body:
                return "", None  # nothing but whitespace yet: cannot tell
            if not (body.startswith(f.start) or f.start.startswith(body)):
                return "", text  # no reasoning in this answer: all content
        if body.startswith(f.start):
            body = body[len(f.start) :]
        elif f.start.startswith(body):
            body = ""  # the opening tag is still arriving
        body = body.lstrip()
        held = 0 if sep else _partial_suffix(body, f.end)  # may begin the closing tag
        body = body[: len(body) - held].rstrip()
        new = body[len(self.sent_reasoning) :] if body.startswith(self.sent_reasoning) else ""
        self.sent_reasoning += new
        return new, (tail.lstrip() if sep else None)


def _partial_suffix(text: str, marker: str) -> int:
    for n in range(min(len(marker) - 1, len(text)), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0
