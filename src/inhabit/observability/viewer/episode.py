"""One episode, made ready for its page: turns with their calls, the final diff, grading, flags.

The trajectory record (inhabit.types) holds no diff of its own. The final diff is rebuilt by
replaying the episode's successful `write_file` and `edit_file` calls over the task's original
files, which a training run keeps in its task cache (`cache/tasks-*/<task>/workspace`); files a
`run` command changed are not seen that way, and the page says so. Without the original files,
each edit is shown as its own small diff. A `diff` the record carries (an `inhabit agent` session
saves one) is used as it is.

Highlighting is Pygments' (server-side, HTML-escaped by its formatter); every other string reaches
the page through Jinja's autoescape, so model output and observations render as text.
"""

from __future__ import annotations

import difflib
import functools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markupsafe import Markup

MAX_FILE_BYTES = 2 << 20
"""Original files larger than this are not read for the diff."""


@functools.cache
def flag_explanations() -> dict[str, str]:
    """Each hack flag's explanation, from the flag list in `inhabit.grading.hacks`' docstring."""
    from inhabit.grading import hacks

    out: dict[str, str] = {}
    current = None
    for line in (hacks.__doc__ or "").splitlines():
        m = re.match(r"^    (\w+)\s{2,}(\S.*)$", line)
        if m and m.group(1) in hacks.ALL_FLAGS:
            current = m.group(1)
            out[current] = m.group(2).strip()
        elif current and re.match(r"^\s{8,}\S", line):
            out[current] += " " + line.strip()
        else:
            current = None
    return out


@dataclass
class Call:
    index: int
    tool: str
    args: dict[str, Any]
    observation: str
    error: bool
    truncated: bool
    duration_s: float


@dataclass
class Token:
    text: str
    title: str
    low: bool
    """Logprob below log(0.5): the model was unsure of this token."""


@dataclass
class Turn:
    kind: str
    number: int | None
    """Action turns are numbered across segments (as tool calls count them); summaries have None."""
    text: str
    tokens: list[Token] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    finish_reason: str = ""


@dataclass
class FileDiff:
    path: str
    html: Markup
    note: str = ""


def _token_texts(ids: list[int], tokenizer_file: Path | None) -> list[str]:
    if tokenizer_file is None:
        return [f"#{i}" for i in ids]
    tok = _load_tokenizer(str(tokenizer_file))
    if tok is None:
        return [f"#{i}" for i in ids]
    return [tok.decode([i], skip_special_tokens=False) for i in ids]


@functools.lru_cache(maxsize=8)
def _load_tokenizer(path: str) -> Any:
    try:
        from tokenizers import Tokenizer

        return Tokenizer.from_file(path)
    except Exception:  # an unreadable tokenizer only costs the token names
        return None


def turns(record: dict[str, Any], tokenizer_file: Path | None = None) -> list[tuple[int, list[Turn]]]:
    """Per segment, its turns in order, each action turn with the calls it made."""
    calls_by_turn: dict[int, list[Call]] = {}
    for c in record.get("tool_calls") or []:
        calls_by_turn.setdefault(int(c.get("turn", -1)), []).append(
            Call(
                index=int(c.get("index", 0)),
                tool=str(c.get("tool") or "(malformed)"),
                args=dict(c.get("args") or {}),
                observation=str(c.get("observation", "")),
                error=bool(c.get("error")),
                truncated=bool(c.get("truncated")),
                duration_s=float(c.get("duration_s") or 0.0),
            )
        )
    out: list[tuple[int, list[Turn]]] = []
    action = 0
    for seg in record.get("segments") or []:
        seg_turns: list[Turn] = []
        for t in seg.get("turns") or []:
            kind = t.get("kind", "action")
            ids, lps, vers = t.get("completion_token_ids"), t.get("logprobs"), t.get("versions")
            tokens: list[Token] = []
            if ids and lps and len(ids) == len(lps):
                for i, (text, lp) in enumerate(zip(_token_texts(ids, tokenizer_file), lps, strict=True)):
                    v = f", version {vers[i]}" if vers and i < len(vers) else ""
                    tokens.append(Token(text, f"logprob {lp:.3f} (p={2.718281828**lp:.2f}){v}", lp < -0.693))
            turn = Turn(kind, action if kind == "action" else None, str(t.get("text", "")), tokens)
            turn.finish_reason = str(t.get("finish_reason", ""))
            if kind == "action":
                turn.calls = sorted(calls_by_turn.get(action, []), key=lambda c: c.index)
                action += 1
            seg_turns.append(turn)
        out.append((int(seg.get("index", len(out))), seg_turns))
    return out


def highlight_diff(text: str) -> Markup:
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import DiffLexer

    return Markup(highlight(text, DiffLexer(), HtmlFormatter(cssclass="hl", nowrap=False)))


def _read_original(workspace: Path, rel: str) -> str | None:
    target = (workspace / rel).resolve()
    if not target.is_relative_to(workspace) or not target.is_file():
        return None
    if target.stat().st_size > MAX_FILE_BYTES:
        return None
    try:
        return target.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def final_diff(record: dict[str, Any], workspace: Path | None) -> tuple[list[FileDiff], str]:
    """The episode's diff per file, and a note on how it was made."""
    for carried in ((record.get("grading") or {}).get("diff"), (record.get("metadata") or {}).get("diff")):
        if isinstance(carried, str) and carried.strip():
            return [
                FileDiff("(recorded diff)", highlight_diff(carried))
            ], "the diff recorded with the episode"
    edits = [
        c
        for c in record.get("tool_calls") or []
        if c.get("tool") in ("write_file", "edit_file")
        and not c.get("error")
        and isinstance(c.get("args"), dict)
    ]
    if workspace is None:
        diffs = []
        for c in edits:
            a = c["args"]
            path = str(a.get("path", "?"))
            old, new = (
                (str(a.get("old", "")), str(a.get("new", "")))
                if c["tool"] == "edit_file"
                else ("", str(a.get("content", "")))
            )
            text = "".join(
                difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}")
            )
            diffs.append(FileDiff(path, highlight_diff(text), f"turn {c.get('turn')}: {c['tool']}"))
        return diffs, "each edit on its own (the task's original files are not in this run folder)"
    files: dict[str, tuple[str | None, str | None]] = {}
    for c in edits:
        a = c["args"]
        path = str(a.get("path", "")).lstrip("/")
        if path not in files:
            original = _read_original(workspace, path)
            files[path] = (original, original)
        original, current = files[path]
        if c["tool"] == "write_file":
            current = str(a.get("content", ""))
        elif current is not None and str(a.get("old", "")) in current:
            current = current.replace(str(a.get("old", "")), str(a.get("new", "")), 1)
        files[path] = (original, current)
    diffs = []
    for path, (original, current) in sorted(files.items()):
        if original == current:
            continue
        text = "".join(
            difflib.unified_diff(
                (original or "").splitlines(True), (current or "").splitlines(True), f"a/{path}", f"b/{path}"
            )
        )
        diffs.append(FileDiff(path, highlight_diff(text), "new file" if original is None else ""))
    return (
        diffs,
        "the task's original files with the episode's write_file and edit_file calls replayed (changes made by `run` commands are not shown)",
    )


def grading_rows(record: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(test, outcome, failure message) for every graded test."""
    g = record.get("grading") or {}
    messages = g.get("messages") or {}
    return [(str(t), str(o), str(messages.get(t, ""))) for t, o in (g.get("outcomes") or {}).items()]


def flags(record: dict[str, Any]) -> list[tuple[str, str, bool]]:
    """(flag, explanation, fatal) for each flag of the episode."""
    expl = flag_explanations()
    fatal = set((record.get("grading") or {}).get("fatal_flags") or [])
    return [
        (f, expl.get(f, "no description in inhabit.grading.hacks"), f in fatal)
        for f in record.get("flags") or []
    ]
