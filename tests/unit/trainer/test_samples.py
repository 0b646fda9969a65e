"""Trajectory records -> samples: turn merging (the re-tokenization trap), failures, advantages, batching."""

from __future__ import annotations

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from inhabit.trainer.batching import collate, pack_microbatches
from inhabit.trainer.samples import (
    Sample,
    count_summary_segment_samples,
    group_samples,
    segment_samples,
    split_stale,
    trajectory_samples,
)
from inhabit.types import Segment, Trajectory, TurnRecord


def turn(prompt, completion, *, version=0, routes=True, kind="action") -> TurnRecord:
    n = len(completion)
    return TurnRecord(
        kind=kind,
        text="",
        prompt_token_ids=list(prompt),
        completion_token_ids=list(completion),
        logprobs=[-0.1 * (i + 1) for i in range(n)],
        versions=[version] * n,
        routed_experts=[[[t % 4, (t + 1) % 4]] for t in completion] if routes else None,
    )


def traj(segments, *, reward=1.0, status="finished", task="t") -> Trajectory:
    return Trajectory(
        task_id=task,
        instruction="",
        status=status,
        reward=reward,
        segments=[Segment(index=i, messages=[], turns=turns) for i, turns in enumerate(segments)],
    )


def test_prefix_consistent_turns_merge_into_one_sequence() -> None:
    t0 = turn([1, 2, 3], [10, 11], version=3)
    t1 = turn([1, 2, 3, 10, 11, 20, 21], [12], version=4)  # observation 20, 21 then generation
    (s,) = segment_samples(Segment(index=0, messages=[], turns=[t0, t1]), advantage=0.5, reward=1.0)
    assert s.input_ids.tolist() == [1, 2, 3, 10, 11, 20, 21, 12]
    assert s.loss_mask.tolist() == [False, False, False, True, True, False, False, True]
    torch.testing.assert_close(s.behaviour_logprobs, torch.tensor([0, 0, 0, -0.1, -0.2, 0, 0, -0.1]))
    assert s.versions.tolist() == [-1, -1, -1, 3, 3, -1, -1, 4]
    assert s.advantage == 0.5 and s.meta["turns"] == 2 and s.min_version == 3
    # routes: completion token i's routes sit at input position len(prompt) - 1 + i
    r = s.routed_experts
    assert r.shape == (8, 1, 2)
    assert r[2].tolist() == [[10 % 4, 11 % 4]] and r[3].tolist() == [[11 % 4, 12 % 4]]
    assert r[6].tolist() == [[12 % 4, 13 % 4]]
    assert (r[[0, 1, 4, 5, 7]] == -1).all(), "unrecorded positions route freely"


def test_retokenized_turns_become_separate_samples() -> None:
    # Turn 2's prompt re-encoded turn 1's completion differently ([10, 11] -> [99]): the trap.
    t0 = turn([1, 2, 3], [10, 11])
    t1 = turn([1, 2, 3, 99, 20], [12, 13])
    samples = segment_samples(Segment(index=0, messages=[], turns=[t0, t1]), advantage=-1.0)
    assert [s.input_ids.tolist() for s in samples] == [[1, 2, 3, 10, 11], [1, 2, 3, 99, 20, 12, 13]]
    assert [s.loss_mask.tolist() for s in samples] == [
        [False, False, False, True, True],
        [False, False, False, False, False, True, True],
    ]
    assert all(s.advantage == -1.0 for s in samples)


def test_a_break_in_the_middle_splits_into_runs() -> None:
    t0 = turn([1, 2], [3])
    t1 = turn([1, 2, 3, 4], [5])  # extends t0
    t2 = turn([7, 8], [9])  # does not extend (e.g. a truncated context)
    t3 = turn([7, 8, 9, 6], [5])  # extends t2
    samples = segment_samples(Segment(index=0, messages=[], turns=[t0, t1, t2, t3]), advantage=1.0)
    assert [s.input_ids.tolist() for s in samples] == [[1, 2, 3, 4, 5], [7, 8, 9, 6, 5]]


def test_turns_without_tokens_or_logprobs_are_left_out_and_break_the_chain() -> None:
    t0 = turn([1, 2], [3])
    blind = TurnRecord(text="from an API without logprobs")
    t2 = turn([1, 2, 3, 4], [5])
    samples = segment_samples(Segment(index=0, messages=[], turns=[t0, blind, t2]), advantage=1.0)
    assert [s.input_ids.tolist() for s in samples] == [[1, 2, 3], [1, 2, 3, 4, 5]]
    bad = turn([1], [2, 3]).model_copy(update={"logprobs": [-0.5]})  # lengths disagree
    assert segment_samples(Segment(index=0, messages=[], turns=[bad]), advantage=1.0) == []


def test_summary_segments_are_separate_samples_sharing_the_episode_advantage() -> None:
    seg0 = [turn([1, 2], [3]), turn([1, 2, 3, 4, 5], [6], kind="summary")]
    seg1 = [turn([1, 7], [8])]
    samples = trajectory_samples(traj([seg0, seg1], reward=0.0), advantage=-0.25)
    assert [s.input_ids.tolist() for s in samples] == [[1, 2, 3, 4, 5, 6], [1, 7, 8]]
    assert [s.advantage for s in samples] == [-0.25, -0.25]
    assert samples[0].source.startswith("t/0#0") and samples[1].source.startswith("t/0#1")
    # the segment holds no summary text here, so neither sample counts as a summary segment's
    assert count_summary_segment_samples(samples) == 0
    t = traj([seg0, seg1], reward=0.0)
    closed = Segment(index=0, messages=[], turns=seg0, summary="the bug is in b.py")
    samples = trajectory_samples(t.model_copy(update={"segments": [closed, t.segments[1]]}), advantage=-0.25)
    assert [bool(s.meta.get("summary_segment")) for s in samples] == [True, False]
    assert count_summary_segment_samples(samples) == 1


def test_group_samples_leave_out_failed_rollouts_before_the_mean() -> None:
    ok1 = traj([[turn([1, 2], [3])]], reward=1.0)
    ok0 = traj([[turn([1, 2], [4])]], reward=0.0)
    crashed = traj([[turn([1, 2], [5])]], reward=0.0, status="sandbox_error")
    ungraded = traj([[turn([1, 2], [6])]], reward=None)
    limit = traj([[turn([1, 2], [7])]], reward=0.0, status="turn_limit")
    samples = group_samples([ok1, ok0, crashed, ungraded, limit], group_id="g")
    assert [s.input_ids[-1].item() for s in samples] == [3, 4, 7]
    torch.testing.assert_close(
        torch.tensor([s.advantage for s in samples]), torch.tensor([2 / 3, -1 / 3, -1 / 3])
    )
    assert all(s.group_id == "g" for s in samples)


def test_zero_variance_groups_are_dropped_unless_asked() -> None:
    group = [traj([[turn([1, 2], [3])]], reward=1.0), traj([[turn([1, 2], [4])]], reward=1.0)]
    assert group_samples(group) == []
    kept = group_samples(group, drop_zero_advantage=False)
    assert len(kept) == 2 and all(s.advantage == 0.0 for s in kept)


def _sample(n: int, routes: bool = False) -> Sample:
    mask = torch.zeros(n, dtype=torch.bool)
    mask[1:] = True
    return Sample(
        input_ids=torch.arange(n) + 5,
        loss_mask=mask,
        behaviour_logprobs=torch.full((n,), -1.0),
        versions=torch.zeros(n, dtype=torch.long),
        advantage=float(n),
        routed_experts=torch.zeros(n, 2, 2, dtype=torch.long) if routes else None,
    )


def test_pack_microbatches_respects_the_padded_token_budget() -> None:
    samples = [_sample(n) for n in (10, 3, 7, 25, 4, 9)]
    groups = pack_microbatches(samples, token_budget=20)
    assert sorted(i for g in groups for i in g) == list(range(6))
    for g in groups:
        longest = max(samples[i].num_tokens for i in g)
        assert len(g) * longest <= 20 or len(g) == 1
    assert [3] in groups, "a sample over the budget gets its own micro-batch"
    assert pack_microbatches(samples, 20) == groups, "deterministic"


def test_collate_right_pads_with_neutral_values() -> None:
    mb = collate([_sample(3, routes=True), _sample(5)], pad_token_id=2)
    assert mb.input_ids.tolist() == [[5, 6, 7, 2, 2], [5, 6, 7, 8, 9]]
    assert mb.attention_mask.tolist() == [[1, 1, 1, 0, 0], [1] * 5]
    assert mb.loss_mask[0].tolist() == [False, True, True, False, False]
    assert mb.versions[0, 3:].tolist() == [-1, -1]
    assert mb.advantages.tolist() == [3.0, 5.0]
    assert mb.routed_experts.shape == (2, 5, 2, 2)
    assert (mb.routed_experts[0, :3] == 0).all() and (mb.routed_experts[0, 3:] == -1).all()
    assert (mb.routed_experts[1] == -1).all(), "a sample without routes routes freely"


def test_prompt_routes_fill_positions_completion_routes_do_not_cover() -> None:
    from types import SimpleNamespace

    # An engine that also reports prompt routes (positions 0..P-2), as TurnRecord carries them.
    t0 = turn([1, 2, 3], [10, 11]).model_copy(update={"prompt_routed_experts": [[[0, 1]], [[2, 3]]]})
    t1 = turn([1, 2, 3, 10, 11, 20], [12]).model_copy(update={"prompt_routed_experts": [[[3, 3]]] * 5})
    (s,) = segment_samples(SimpleNamespace(turns=[t0, t1]), advantage=1.0)
    r = s.routed_experts[:, 0].tolist()
    # positions 0, 1 from t0's prompt; 2, 3 from t0's completion (kept over t1's prefill); 4 from
    # t1's prompt; 5 from t1's completion; 6 (last) unknown.
    assert r == [[0, 1], [2, 3], [2, 3], [3, 0], [3, 3], [0, 1], [-1, -1]]


@settings(max_examples=200, deadline=None)
@given(
    versions=st.lists(st.lists(st.integers(-1, 20), min_size=1, max_size=6), min_size=0, max_size=8),
    current=st.integers(0, 25),
    bound=st.integers(0, 5),
)
def test_split_stale_lets_nothing_older_than_the_bound_through(versions, current, bound) -> None:
    samples = []
    for vs in versions:
        n = len(vs) + 1
        mask = torch.tensor([False] + [True] * len(vs))
        samples.append(
            Sample(
                input_ids=torch.zeros(n, dtype=torch.long),
                loss_mask=mask,
                behaviour_logprobs=torch.zeros(n),
                versions=torch.tensor([-1, *vs]),
                advantage=1.0,
            )
        )
    fresh, stale = split_stale(samples, current, bound)
    assert len(fresh) + len(stale) == len(samples)
    for s in fresh:
        known = [v for v in s.versions[1:].tolist() if v >= 0]
        assert all(current - v <= bound for v in known)
    for s in stale:
        assert any(current - v > bound for v in s.versions[1:].tolist() if v >= 0)
