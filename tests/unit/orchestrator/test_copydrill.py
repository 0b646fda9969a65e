"""The copy drill (`model.bootstrap.copy_drill`): its rows can be predicted by copying and by nothing
else, and a few steps of it train a tiny model."""

from __future__ import annotations

import math
import random

import pytest

from inhabit.models.tiny import TinyModelSpec, build_tiny_model
from inhabit.orchestrator.quickstart.bootstrap import quickstart_tokenizer
from inhabit.orchestrator.quickstart.copydrill import (
    PATTERN,
    chance_loss,
    copy_drill,
    drill_batch,
    drill_pieces,
)


@pytest.fixture(scope="module")
def tok():
    return quickstart_tokenizer()


def test_every_target_is_a_copy_of_the_token_one_pattern_back(tok):
    pieces = drill_pieces(tok)
    assert len(pieces) > 500  # the BPE's lowercase word pieces
    assert all(tok.convert_ids_to_tokens(i).isalpha() for i in pieces)
    inp, tgt = drill_batch(pieces, random.Random(0), batch_size=32, length=128)
    assert inp.shape == tgt.shape == (32, 128)
    for row, targets in zip(inp.tolist(), tgt.tolist(), strict=True):
        first = next(k for k, t in enumerate(targets) if t != -100)
        n = first + 1  # the pattern's length: the first target is the first token of its repeat
        assert PATTERN[0] <= n <= PATTERN[1]
        for k, t in enumerate(targets):
            if t == -100:
                assert k < first or k == len(row) - 1
                continue
            assert t == row[k + 1] == row[k + 1 - n]  # a copy, and the next token
        # within the first pattern nothing is learned: its tokens are random draws
        assert all(t == -100 for t in targets[: n - 1])


def test_a_few_steps_learn_the_pieces_and_report_accuracy(tok):
    vocab = (len(tok) + 63) // 64 * 64
    spec = TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)
    model = build_tiny_model(spec, vocab_size=vocab, seed=0)
    log = copy_drill(model, tok, steps=40, batch_size=8, length=64, lr=1e-2)
    assert len(log) == 40 and not model.training
    first, last = log[0][0], sum(x for x, _ in log[-5:]) / 5
    assert abs(first - math.log(vocab)) < 0.5  # an untrained model: uniform over the vocabulary
    # it has learnt which tokens the drill draws (the chance loss of a model that copies nothing)
    assert last < chance_loss(len(drill_pieces(tok))) + 0.5 < first
    assert all(0.0 <= acc <= 1.0 for _, acc in log)
