"""Made-up names for the multistep bootstrap: one transcript, many packages.

The multistep bootstrap imitates a few dozen expert transcripts on the train split's twelve
packages. A tiny model can learn them by heart, package names included, and then recalls a train
package on a held-out task instead of copying the name the instruction and the test output show
(docs/results.md, "Multistep"). Playing the expert on made-up names (`model.bootstrap.fresh_names`)
adds a few hundred names, each a sandboxed episode, and the model learns those too.

This module makes the names free instead. `names_in` reads a transcript's own identifiers from its
text (the package the instruction names, module paths and imports, the functions its reads
define and its tests call), and `renamed` replaces each of them, consistently in every message
(instruction, calls, observations, summaries), by a made-up identifier drawn afresh at each draw.
The episode stays the same episode: a uniform rename of identifiers changes no call's meaning, the
edit's `old` text is still the file's text, and the paths still match. What changes is that the
names can no longer be predicted from memory, only copied from earlier in the context, which is the
skill a held-out package needs. Tool names, the XML call syntax, Python's keywords and builtins
and the standard library's module names are never renamed.
"""

from __future__ import annotations

import builtins
import functools
import keyword
import random
import re
import sys
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["NameDrawer", "is_renamable", "names_in", "renamed", "transcript_words"]

_IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
_EDGE_BEFORE = r"(?<![A-Za-z0-9])"
_EDGE_AFTER = r"(?![A-Za-z0-9])"
"""Names are matched between non-alphanumerics, so `core` is found in `test_core` and `core.py` (the
test file of a module carries its name) but not in `score`; longer names are tried first, so
`total_cost` is renamed as itself, not as `total` + `_cost`."""

_TEST_SUFFIXES = ("_other", "_more", "_direct")
"""Test names the multistep family derives from a function name (`test_<fn>`, `test_<fn>_other`)."""

_MIN_LEN = 3


@functools.cache
def _protected() -> frozenset[str]:
    """Identifiers a rename must never touch: the harness's own words (tool names, call syntax,
    prompts), Python's keywords, soft keywords and builtins, the standard library's modules."""
    from inhabit.harness.prompts import SUMMARY_HEADER, SUMMARY_PROMPT, system_prompt

    words: set[str] = set()
    for text in (system_prompt(), SUMMARY_PROMPT, SUMMARY_HEADER, "Task: observation index tool name"):
        words.update(re.findall(_IDENT, text))
    words.update(keyword.kwlist, keyword.softkwlist, dir(builtins), sys.stdlib_module_names)
    for kind in (str, bytes, int, float, list, dict, set, tuple):  # `d.items()` stays a dict's method
        words.update(dir(kind))
    words.update({"self", "cls", "test", "tests", "py", "pytest", "conftest", "assert", "args", "kwargs"})
    return frozenset(words)


def is_renamable(name: str) -> bool:
    """Whether a rename may touch `name`: not a protected word, not a constant's upper-case name
    (constants keep theirs), not private, at least `_MIN_LEN` long."""
    return (
        len(name) >= _MIN_LEN and name not in _protected() and not name.isupper() and not name.startswith("_")
    )


def names_in(messages: Sequence[Any]) -> list[str]:
    """The package, module and function names of a multistep transcript, read from its text (the
    first message is the system prompt and is not read). Longest first."""
    text = "\n".join(m.content for m in messages[1:])
    found = re.search(r"the package `(" + _IDENT + r")`", text)
    if found is None:
        return []
    package = found.group(1)
    names = {package}
    pkg = re.escape(package)
    names.update(re.findall(rf"{_EDGE_BEFORE}{pkg}/({_IDENT})\.py", text))
    names.update(re.findall(rf"{_EDGE_BEFORE}{pkg}\.({_IDENT})", text))
    names.update(re.findall(r"tests/test_(" + _IDENT + r")\.py", text))
    for group in re.findall(r"from (?:\.|" + pkg + r"(?:\." + _IDENT + r")?) import ([^\n]+)", text):
        names.update(n.split(" as ")[0].strip(" ()") for n in group.split(","))
    names.update(re.findall(r"(?:^|\t|\n)\s*def (" + _IDENT + r")\(", text))
    # A test's name is `test_<function>[_other]`: the function's rename carries it along.
    for test in [n for n in names if n.startswith("test_")] + re.findall(r"::test_(" + _IDENT + r")", text):
        names.discard(test)
        test = test.removeprefix("test_")
        for suffix in _TEST_SUFFIXES:
            test = test.removesuffix(suffix)
        names.add(test)
    modules = {m for m in names if m != package}
    for mod in modules:  # `ledger.gross(...)` in a facade: `gross` is a function of `ledger`
        names.update(re.findall(rf"{_EDGE_BEFORE}{re.escape(mod)}\.({_IDENT})\(", text))
    names.discard("")
    return sorted((n for n in names if n.isidentifier() and is_renamable(n)), key=lambda n: (-len(n), n))


class NameDrawer:
    """Made-up identifiers of varied shape, so that no one style can be guessed: consonant-vowel
    words, runs of letters, and joins of the tokenizer's own word pieces (`pieces`); a name of the
    original's underscore count, distinct within one draw and from every word of the transcript."""

    _CONSONANTS = "bcdfghjklmnprstvwxz"
    _VOWELS = "aeiouy"

    def __init__(self, pieces: Iterable[str] = ()) -> None:
        self.pieces = sorted(
            {p for p in pieces if p.isascii() and p.isalpha() and p.islower() and 2 <= len(p) <= 6}
        )

    def word(self, rng: random.Random, short: bool = False) -> str:
        """One word; `short` for a part of a snake_case name (the originals' parts are short too)."""
        style = rng.random()
        if style < 0.35 or not self.pieces:
            n = rng.randint(1, 2) if short else rng.randint(2, 4)
            return "".join(rng.choice(self._CONSONANTS) + rng.choice(self._VOWELS) for _ in range(n))
        if style < 0.55:
            return "".join(
                rng.choice(self._CONSONANTS + self._VOWELS) for _ in range(rng.randint(3, 5 if short else 8))
            )
        return "".join(rng.choice(self.pieces) for _ in range(1 if short else rng.randint(1, 2)))

    def draw(self, originals: Sequence[str], rng: random.Random, avoid: set[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        taken = set(avoid)
        for name in originals:
            parts = name.count("_") + 1
            while True:
                new = "_".join(self.word(rng, short=parts > 1) for _ in range(parts))
                if len(new) >= _MIN_LEN and new not in taken and is_renamable(new) and new.isidentifier():
                    break
            taken.add(new)
            out[name] = new
        return out


def renamed(messages: Sequence[Any], mapping: dict[str, str]) -> list[Any]:
    """`messages` with every name of `mapping` replaced in every message but the first (the system
    prompt), in one pass (a replacement is never renamed again)."""
    if not mapping:
        return list(messages)
    pattern = re.compile(
        _EDGE_BEFORE
        + "("
        + "|".join(re.escape(n) for n in sorted(mapping, key=len, reverse=True))
        + ")"
        + _EDGE_AFTER
    )
    swap = lambda m: mapping[m.group(1)]  # noqa: E731
    return [
        messages[0],
        *(m.model_copy(update={"content": pattern.sub(swap, m.content)}) for m in messages[1:]),
    ]


def transcript_words(messages: Sequence[Any]) -> set[str]:
    """Every identifier of the transcript (a made-up name must not collide with one of them)."""
    return {w for m in messages for w in re.findall(_IDENT, m.content)}
