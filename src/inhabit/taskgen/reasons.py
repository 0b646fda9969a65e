"""What a task build says about each candidate bug: why one was rejected, in words a user can act
on; whether a kept one shows as a wrong value or as a crash; and which failures give the bug away.

A bug whose failing tests name it (`NameError: name 'total' is not defined` points at the line
that lost its assignment; `unsupported operand type(s) for -: 'tuple' and 'tuple'` at the operator
swapped) is no exercise in finding a bug: the builder rejects it as `giveaway`. Kept bugs are
counted by how their first failing test fails: `wrong value` (an assertion about a result) or
`exception: <type>` (the code crashed); the build report gives that mix and the mix of operators.
Messages in instructions lose object addresses (`<Foo object at 0x7f3a...>`), which differ
between runs and say nothing about the bug.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

__all__ = ["failure_kind", "giveaway", "reason", "scrub_addresses"]

_ADDRESS = re.compile(r"0x[0-9a-fA-F]{4,}")
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Warning|Exit|Interrupt))\b")
# Failures that point at the bug's line or operator rather than at wrong behaviour.
_GIVEAWAYS = (
    re.compile(r"^(?:NameError|UnboundLocalError|SyntaxError|IndentationError)\b"),
    re.compile(r"unsupported operand type\(s\)"),
    re.compile(r"can't multiply sequence"),
    re.compile(r"bad operand type for unary"),
    re.compile(r"can only concatenate"),
)


def scrub_addresses(text: str) -> str:
    """`text` with object addresses replaced by `0x...` (they differ between runs)."""
    return _ADDRESS.sub("0x...", text)


def _first_line(message: str) -> str:
    return " ".join((message or "").split())[:300]


def failure_kind(failing: Sequence[str], messages: Mapping[str, str]) -> str:
    """`wrong value` when the first failing test failed an assertion (the code returned something
    else), else `exception: <type>` (the code raised), or `unknown` without a message."""
    for node in failing:
        line = _first_line(messages.get(node, ""))
        if not line:
            continue
        if line.startswith(("assert ", "AssertionError")) or line.startswith("Failed: DID NOT RAISE"):
            return "wrong value"
        m = _EXCEPTION.match(line)
        return f"exception: {m.group(1).rsplit('.', 1)[-1]}" if m else "wrong value"
    return "unknown"


def giveaway(failing: Sequence[str], messages: Mapping[str, str]) -> str | None:
    """The failure that names the bug (a NameError, an operator applied to the wrong types) when
    every failing test's message is one, else None."""
    lines = [_first_line(messages.get(n, "")) for n in failing]
    lines = [ln for ln in lines if ln]
    if lines and all(any(p.search(ln) for p in _GIVEAWAYS) for ln in lines):
        return lines[0]
    return None


def reason(status: str, where: str, **facts: object) -> str:
    """Why a candidate (`where`: `operator in function at path:line`) was not kept, with what to
    do about it."""
    if status == "no_failure":
        return (
            f"{where}: no test failed with this bug, so the suite does not check that line (or the "
            "change does not alter behaviour); tests of that code, or more candidates "
            "(--max-candidates), give tasks"
        )
    if status == "all_failed":
        return (
            f"{where}: every passing test failed, so the bug breaks the project as a whole and its "
            "failures say nothing about where it is"
        )
    if status == "collection_error":
        detail = facts.get("detail")
        return (
            f"{where}: test modules stop importing with this bug"
            + (f" ({detail})" if detail else "")
            + "; grading would count their tests as missing"
        )
    if status == "timeout":
        return (
            f"{where}: the suite ran past its {facts.get('limit_s', '?')} s limit with this bug (a loop "
            "that no longer ends?); if the suite is only slow, raise the build's timeout_s"
        )
    if status == "no_report":
        return f"{where}: the test run with this bug wrote no trustworthy report ({facts.get('detail', '')})"
    if status == "uncovered":
        return f"{where}: no test runs this function (coverage map); tests of it would give tasks"
    if status == "giveaway":
        return (
            f"{where}: the failures name the bug ({facts.get('detail', '')}), so an agent would read "
            "the fix off the error"
        )
    if status == "invalid":
        return f"{where}: `tasks check` rejected the task: {facts.get('detail', '')}"
    if status == "error":
        return f"{where}: the build failed on this candidate: {facts.get('detail', '')}"
    return f"{where}: {status}"
