"""Stop strings and text of completions (detokenization), shared by the engine and the server.

A stop string can span tokens, so after each token we decode a short tail of the completion
(enough tokens to hold the longest stop string) and look for it. The completion's token ids keep
the token that completed the stop string (the trainer must see what was sampled); its text is cut
just before the stop string, as OpenAI's API does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class StopChecker:
    """Detects stop strings at the end of a growing token sequence."""

    def __init__(self, tokenizer: Any, stops: Sequence[str]) -> None:
        self.tokenizer = tokenizer
        self.stops = tuple(s for s in stops if s)
        # Every token decodes to at least one character except partial UTF-8 bytes; the slack
        # covers multi-byte characters split across tokens.
        self.window = max((len(s) for s in self.stops), default=0) + 8

    def hit(self, token_ids: Sequence[int]) -> bool:
        """True when the text of `token_ids` now contains a stop string in its newest tokens."""
        if not self.stops:
            return False
        tail = self.tokenizer.decode(list(token_ids[-self.window :]), skip_special_tokens=True)
        return any(s in tail for s in self.stops)


def completion_text(tokenizer: Any, token_ids: Sequence[int], stops: Sequence[str] = ()) -> tuple[str, bool]:
    """(text, stopped): the decoded completion, cut before the first stop string if any."""
    if tokenizer is None:
        return "", False
    text = tokenizer.decode(list(token_ids), skip_special_tokens=True)
    cut = min((i for i in (text.find(s) for s in stops if s) if i >= 0), default=-1)
    if cut >= 0:
        return text[:cut], True
    return text, False


def safe_prefix(text: str, stops: Sequence[str], finished: bool) -> str:
    """The part of a streaming text that can be sent now without ever sending part of a stop string.

    Holds back a trailing partial UTF-8 character and any suffix that could begin a stop string.
    """
    if finished:
        return text
    if text.endswith("\ufffd"):
        text = text.rstrip("\ufffd")
    hold = 0
    for s in stops:
        for n in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:n]):
                hold = max(hold, n)
                break
    return text[: len(text) - hold]
