"""Documents as packed next-token samples, from a position that can be saved and resumed.

    stream = TokenStream(corpus.split("train"), tokenizer_encode, sep_id, seed=0)
    batch = [lm_sample(stream.take(512)) for _ in range(16)]     # 16 sequences of 512 tokens
    trainer.data_state = stream.state()                          # {"epoch", "doc", "offset"}
    TokenStream(..., state=trainer.data_state)                   # continues with the next token

The stream is the documents of one epoch in a seeded order (another order each epoch), each
followed by a separator token (end of text), concatenated without end; a sequence is the next
`seq_len` tokens of it, so documents run across sequence boundaries and no token is padding.
Attention is not masked at document boundaries (the usual packing; the separator tells the model a
new document starts). Only the document in progress is tokenized and kept, so a corpus of any size
costs the memory of one document, and a position is three integers: the epoch, the index of the
document in that epoch's order and the number of its tokens already taken.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

import torch

from inhabit.trainer.samples import Sample

Encode = Callable[[str], list[int]]


def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The order of `n` documents in an epoch (a permutation that depends on seed and epoch only)."""
    order = list(range(n))
    random.Random(f"{seed}:{epoch}").shuffle(order)  # a str seed hashes the same in every process
    return order


class TokenStream:
    """An endless, resumable stream of a split's tokens (see the module docstring)."""

    def __init__(
        self,
        docs: Sequence[str],
        encode: Encode,
        sep_id: int,
        *,
        seed: int = 0,
        state: dict[str, Any] | None = None,
    ) -> None:
        if len(docs) == 0:
            raise ValueError("a token stream needs at least one document")
        self.docs, self.encode, self.sep_id, self.seed = docs, encode, sep_id, seed
        state = state or {}
        self.epoch = int(state.get("epoch", 0))
        self.doc = int(state.get("doc", 0))
        self.offset = int(state.get("offset", 0))
        self._order = epoch_order(len(docs), seed, self.epoch)
        self._tokens: list[int] | None = None

    def state(self) -> dict[str, int]:
        """The position of the next token (JSON-able; pass it back as `state`)."""
        return {"epoch": self.epoch, "doc": self.doc, "offset": self.offset}

    @property
    def epochs(self) -> float:
        """Epochs completed, with the current one as a fraction of its documents."""
        return self.epoch + self.doc / len(self.docs)

    def take(self, n: int) -> list[int]:
        """The next `n` tokens."""
        out: list[int] = []
        while len(out) < n:
            if self._tokens is None:
                self._tokens = [*self.encode(self.docs[self._order[self.doc]]), self.sep_id]
            part = self._tokens[self.offset : self.offset + n - len(out)]
            out += part
            self.offset += len(part)
            if self.offset >= len(self._tokens):
                self._tokens, self.offset, self.doc = None, 0, self.doc + 1
                if self.doc == len(self.docs):
                    self.epoch, self.doc = self.epoch + 1, 0
                    self._order = epoch_order(len(self.docs), self.seed, self.epoch)
        return out


def lm_sample(ids: Sequence[int], source: str = "") -> Sample:
    """A next-token sample: every token but the first (which nothing predicts) is a loss token."""
    n = len(ids)
    mask = torch.ones(n, dtype=torch.bool)
    mask[0] = False
    return Sample(
        input_ids=torch.tensor(list(ids), dtype=torch.long),
        loss_mask=mask,
        behaviour_logprobs=torch.zeros(n, dtype=torch.float32),
        versions=torch.full((n,), -1, dtype=torch.long),
        advantage=0.0,
        source=source,
    )


def fixed_sequences(
    docs: Sequence[str], encode: Encode, sep_id: int, *, count: int, seq_len: int, seed: int = 0
) -> list[list[int]]:
    """Up to `count` sequences of `seq_len` tokens from one pass over `docs` in a seeded order (an
    evaluation set: the same every time; fewer when the documents run out)."""
    tokens: list[int] = []
    for i in epoch_order(len(docs), seed, 0):
        if len(tokens) >= count * seq_len:
            break
        tokens += [*encode(docs[i]), sep_id]
    usable = min(count, len(tokens) // seq_len)
    return [tokens[k * seq_len : (k + 1) * seq_len] for k in range(usable)]
