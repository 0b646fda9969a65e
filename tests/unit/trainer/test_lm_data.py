"""Packed next-token data: the stream's order, separators, epochs and exact resume from its state."""

from __future__ import annotations

import torch

from inhabit.trainer.lm_data import TokenStream, epoch_order, fixed_sequences, lm_sample

SEP = 0


def encode(text: str) -> list[int]:
    """A real, tiny tokenizer: one id per character (never the separator's)."""
    return [ord(c) for c in text]


DOCS = ["abc", "defgh", "ij", "klmnopq", "r"]


def test_one_epoch_is_every_document_once_each_followed_by_the_separator():
    stream = TokenStream(DOCS, encode, SEP, seed=3)
    total = sum(len(d) + 1 for d in DOCS)
    tokens = stream.take(total)
    expected = [t for i in epoch_order(len(DOCS), 3, 0) for t in [*encode(DOCS[i]), SEP]]
    assert tokens == expected
    assert stream.state() == {"epoch": 1, "doc": 0, "offset": 0} and stream.epochs == 1.0
    assert sorted(epoch_order(5, 3, 1)) == list(range(5))
    assert epoch_order(5, 3, 0) == epoch_order(5, 3, 0)  # the same in every process
    assert any(epoch_order(5, 3, e) != epoch_order(5, 3, 0) for e in range(1, 4))  # reshuffled per epoch


def test_resuming_from_a_state_continues_with_the_next_token():
    straight = TokenStream(DOCS, encode, SEP, seed=1)
    whole = [straight.take(4) for _ in range(20)]  # several epochs, sequences across documents
    for cut in (1, 3, 7, 12):
        first = TokenStream(DOCS, encode, SEP, seed=1)
        head = [first.take(4) for _ in range(cut)]
        again = TokenStream(DOCS, encode, SEP, seed=1, state=dict(first.state()))
        assert head + [again.take(4) for _ in range(20 - cut)] == whole


def test_lm_sample_and_fixed_sequences():
    s = lm_sample([5, 6, 7])
    assert s.input_ids.tolist() == [5, 6, 7] and s.loss_mask.tolist() == [False, True, True]
    assert s.num_loss_tokens == 2 and s.versions.dtype == torch.long
    seqs = fixed_sequences(DOCS, encode, SEP, count=3, seq_len=5, seed=2)
    assert len(seqs) == 3 and all(len(q) == 5 for q in seqs)
    assert seqs == fixed_sequences(DOCS, encode, SEP, count=3, seq_len=5, seed=2)
    # fewer when the documents run out: one pass, never repeated text
    assert len(fixed_sequences(DOCS, encode, SEP, count=100, seq_len=5)) == sum(len(d) + 1 for d in DOCS) // 5
