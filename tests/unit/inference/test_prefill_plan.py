"""prefill_plan: prompts of similar lengths share a padded batch; the token budget holds."""

from __future__ import annotations

from inhabit.inference.prefill_plan import plan_prefill


def _padded(lengths, chunks):
    return sum(len(c) * max(lengths[i] for i in c) for c in chunks)


def test_every_prompt_once_shortest_first_within_budget():
    lengths = [51, 6, 12, 33, 6, 18, 11, 34, 22, 17] * 6
    chunks = plan_prefill(lengths, budget=400)
    assert sorted(i for c in chunks for i in c) == list(range(len(lengths)))
    for c in chunks:
        assert [lengths[i] for i in c] == sorted(lengths[i] for i in c)
        assert len(c) == 1 or len(c) * max(lengths[i] for i in c) <= 400


def test_spread_lengths_split_equal_lengths_do_not():
    lengths = [6] * 11 + [12] * 15 + [18] * 17 + [51] * 5
    chunks = plan_prefill(lengths, budget=4096)
    assert len(chunks) == 4 and _padded(lengths, chunks) == sum(lengths)
    assert len(plan_prefill([20] * 64, budget=4096)) == 1
    assert plan_prefill([5000], budget=4096) == [[0]]  # a prompt past the budget still runs, alone
