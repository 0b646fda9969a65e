"""Sampling: per-row generators, greedy, top-p, and which logprob is reported."""

from __future__ import annotations

import math

import torch

from inhabit.inference.sampling import RowSampling, sample_tokens


def _row(t=1.0, p=1.0, seed=0):
    return RowSampling(t, p, torch.Generator().manual_seed(seed))


def test_draws_follow_the_distribution():
    probs = torch.tensor([0.1, 0.6, 0.3])
    logits = probs.log()[None].repeat(4000, 1)
    rows = [_row(seed=i) for i in range(4000)]
    tokens, logps, _ = sample_tokens(logits, rows)
    freq = torch.bincount(tokens, minlength=3).double() / 4000
    assert torch.allclose(freq, probs.double(), atol=0.03)
    assert torch.allclose(logps, probs.log()[tokens], atol=1e-6)


def test_greedy_top_p_and_temperature_logprobs():
    logits = torch.tensor([[0.0, 2.0, 1.0]] * 3)
    tokens, logps, top = sample_tokens(
        logits, [_row(t=0.0), _row(p=0.01, seed=5), _row(t=0.5, seed=1)], top_k=2
    )
    assert tokens[:2].tolist() == [1, 1]
    raw = torch.log_softmax(logits[0], -1)
    assert math.isclose(logps[0].item(), raw[1].item(), rel_tol=1e-6)  # greedy: raw
    tempered = torch.log_softmax(logits[2] / 0.5, -1)
    assert math.isclose(logps[2].item(), tempered[tokens[2]].item(), rel_tol=1e-6)
    assert top is not None and top[1][2].tolist() == [1, 2]
    assert torch.allclose(top[0][2], tempered[[1, 2]])
    _, raw_mode, _ = sample_tokens(logits[2:], [_row(t=0.5, seed=1)], logprobs_mode="raw")
    assert math.isclose(raw_mode[0].item(), raw[tokens[2]].item(), rel_tol=1e-6)


def test_same_seed_same_token_whatever_the_neighbours():
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(0))
    alone, _, _ = sample_tokens(logits, [_row(seed=42)])
    crowd, _, _ = sample_tokens(logits.repeat(3, 1), [_row(seed=1), _row(t=0.0), _row(seed=42)])
    assert alone[0] == crowd[2]


def test_penalties_and_bias_shape_the_sampled_distribution_and_its_logprobs():
    """OpenAI's formula on the row's own completion; the logprobs are of the adjusted logits."""
    logits = torch.tensor([[1.0, 2.0, 0.5, 0.0]] * 3)
    g = torch.Generator().manual_seed
    penalized = RowSampling(0.5, 1.0, g(1), presence_penalty=0.4, frequency_penalty=0.3, completion=[1, 1, 2])
    biased = RowSampling(1.0, 1.0, g(2), logit_bias=[(3, 100.0)])
    plain = RowSampling(0.5, 1.0, g(1))
    tokens, logps, top = sample_tokens(logits, [penalized, biased, plain], top_k=4)
    adjusted = logits[0] - torch.tensor([0.0, 2 * 0.3 + 0.4, 0.3 + 0.4, 0.0])
    want = torch.log_softmax(adjusted / 0.5, -1)
    assert math.isclose(logps[0].item(), want[tokens[0]].item(), rel_tol=1e-6)
    assert top is not None and torch.allclose(top[0][0], want.sort(descending=True).values)
    assert tokens[1].item() == 3 and logps[1].item() > -1e-6  # the bias makes token 3 certain
    assert math.isclose(
        logps[2].item(), torch.log_softmax(logits[2] / 0.5, -1)[tokens[2]].item(), rel_tol=1e-6
    )
    greedy, _, _ = sample_tokens(
        logits[:1], [RowSampling(0.0, 1.0, g(0), presence_penalty=2.0, completion=[1])]
    )
    assert greedy.item() == 0  # token 1 (2.0 - 2.0) now loses to token 0 (1.0)


def test_shortcut_batches_equal_the_general_path_bit_for_bit():
    """An all-T=1 batch (no division, no greedy work) gives exactly what the same rows give in a
    batch that takes the general path (a T=0.7 row and a greedy row beside them)."""
    logits = torch.randn(4, 300, generator=torch.Generator().manual_seed(3))
    for mode in ("tempered", "raw"):
        fast = sample_tokens(logits[:2], [_row(seed=1), _row(seed=2)], mode, top_k=3)
        mixed = sample_tokens(
            logits, [_row(seed=1), _row(seed=2), _row(t=0.7, seed=3), _row(t=0.0)], mode, top_k=3
        )
        assert torch.equal(fast[0], mixed[0][:2]) and torch.equal(fast[1], mixed[1][:2])
        assert torch.equal(fast[2][0], mixed[2][0][:2]) and torch.equal(fast[2][1], mixed[2][1][:2])
    greedy_only = sample_tokens(logits, [_row(t=0.0)] * 4)
    assert torch.equal(greedy_only[0], logits.argmax(-1))
    assert torch.equal(greedy_only[1], torch.log_softmax(logits, -1).max(-1).values)
