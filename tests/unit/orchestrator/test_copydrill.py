"""The copy drill (`model.bootstrap.copy_drill`): its rows can be predicted by copying and by nothing
else, a few steps of it train a tiny model, and mixed into the bootstrap (`drill_mix`) it trains
alongside the transcripts; the model cache key ignores both switches while they are off."""

from __future__ import annotations

import math
import random

import pytest
import torch

from inhabit.models.tiny import TinyModelSpec, build_tiny_model
from inhabit.orchestrator.config import ModelConfig
from inhabit.orchestrator.prepare import _model_key_fields
from inhabit.orchestrator.quickstart.bootstrap import quickstart_tokenizer, train_bootstrap
from inhabit.orchestrator.quickstart.copydrill import (
    PATTERN,
    DrillMix,
    chance_loss,
    copy_drill,
    drill_batch,
    drill_loss,
    drill_pieces,
)

SPEC = TinyModelSpec(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)


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
    model = build_tiny_model(SPEC, vocab_size=vocab, seed=0)
    log = copy_drill(model, tok, steps=40, batch_size=8, length=64, lr=1e-2)
    assert len(log) == 40 and not model.training
    first, last = log[0][0], sum(x for x, _ in log[-5:]) / 5
    assert abs(first - math.log(vocab)) < 0.5  # an untrained model: uniform over the vocabulary
    # it has learnt which tokens the drill draws (the chance loss of a model that copies nothing)
    assert last < chance_loss(len(drill_pieces(tok))) + 0.5 < first
    assert all(0.0 <= acc <= 1.0 for _, acc in log)


def test_drill_rows_mixed_into_the_bootstrap_train_the_drill_but_not_its_reported_loss(tok):
    vocab = (len(tok) + 63) // 64 * 64
    gen = random.Random(1)
    # transcripts stand-ins: random token runs, every token trained
    examples = [([gen.randrange(vocab) for _ in range(48)], [True] * 48) for _ in range(6)]
    mixed, plain = (build_tiny_model(SPEC, vocab_size=vocab, seed=0) for _ in range(2))
    mix = DrillMix(tok, rows=8, seed=0, length=64)
    kw = dict(steps=30, batch_size=2, lr=1e-2, warmup=2, seed=0)
    mixed_losses = train_bootstrap(mixed, examples, aux_loss=mix.loss, **kw)
    plain_losses = train_bootstrap(plain, examples, **kw)
    assert len(mix.accuracy) == 30 and all(0.0 <= a <= 1.0 for a in mix.accuracy)
    # the same start and batch: the first step's reported loss is the transcripts' alone
    assert mixed_losses[0] == pytest.approx(plain_losses[0], rel=1e-6)
    # the mixed model was trained on drill rows, the plain one never saw them
    inp, tgt = drill_batch(drill_pieces(tok), random.Random(99), batch_size=16, length=64)
    with torch.no_grad():
        mixed_drill, _ = drill_loss(mixed, inp, tgt)
        plain_drill, _ = drill_loss(plain, inp, tgt)
    assert mixed_drill.item() < plain_drill.item() - 0.5


def test_the_model_cache_key_leaves_the_bootstrap_switches_out_while_off():
    off = _model_key_fields(ModelConfig(preset="dense-1m"))
    assert not {"rename", "copy_drill", "drill_mix", "grep"} & set(off["bootstrap"])
    switches = {"drill_mix": 4, "copy_drill": 10, "rename": 0.5, "grep": 1.0}
    on = _model_key_fields(
        ModelConfig.model_validate({"preset": "dense-1m", "bootstrap": {"steps": 5, **switches}})
    )
    assert {k: on["bootstrap"][k] for k in switches} == switches
    assert on != off
    # with no bootstrap steps the bootstrap's own switches change nothing; the drill still runs
    idle = _model_key_fields(ModelConfig.model_validate({"preset": "dense-1m", "bootstrap": switches}))
    assert idle["bootstrap"]["copy_drill"] == 10
    assert not {"rename", "drill_mix", "grep"} & set(idle["bootstrap"])
