"""Loss functions on hand-computed cases: advantages, clipping, TIS, masking, aggregation, GSPO."""

from __future__ import annotations

import math

import pytest
import torch

from inhabit.trainer.losses import LossConfig, group_advantages, policy_loss

LN = math.log
pytestmark = pytest.mark.filterwarnings("ignore:Converting a tensor with requires_grad")


def test_group_advantages_centre_per_group_and_zero_variance_groups_get_zero() -> None:
    adv = group_advantages([1, 0, 1, 0, 1, 1, 0.5], ["a", "a", "a", "a", "b", "b", "c"])
    assert adv.tolist() == [0.5, -0.5, 0.5, -0.5, 0.0, 0.0, 0.0]


def test_group_advantages_std_normalization() -> None:
    adv = group_advantages([1.0, 0.0, 1.0, 0.0, 3.0, 3.0], [0, 0, 0, 0, 1, 1], normalize_std=True, eps=0.0)
    # group 0: mean 0.5, population std 0.5 -> +-1; group 1: no variance -> 0 (not 0/0).
    assert adv.tolist() == [1.0, -1.0, 1.0, -1.0, 0.0, 0.0]
    adv = group_advantages([2.0, 0.0, 1.0], ["g"] * 3, normalize_std=True, eps=0.0)
    torch.testing.assert_close(adv, torch.tensor([1.0, -1.0, 0.0]) / math.sqrt(2 / 3))


def test_group_advantages_length_mismatch_is_an_error() -> None:
    with pytest.raises(ValueError, match="group ids"):
        group_advantages([1.0, 2.0], ["a"])


def _inputs(diff_new: list[list[float]], diff_rho: list[list[float]] | None = None):
    """logprobs with lp - prox = diff_new and prox - behaviour = diff_rho (log space)."""
    prox = torch.full((len(diff_new), len(diff_new[0])), -2.0)
    lp = (prox + torch.tensor(diff_new)).requires_grad_(True)
    beh = prox - (torch.tensor(diff_rho) if diff_rho is not None else 0.0)
    return lp, prox, beh


MASK = torch.tensor([[False, True, True], [False, True, False]])


def test_token_loss_on_policy_is_reinforce_with_token_mean() -> None:
    lp, prox, beh = _inputs([[0.0] * 3, [0.0] * 3])
    cfg = LossConfig(tis_cap=None)
    loss, stats = policy_loss(lp, prox, beh, torch.tensor([2.0, -1.0]), MASK, cfg)
    # ratio 1 everywhere: loss = -(2 + 2 - 1) / 3 tokens
    assert float(loss) == pytest.approx(-1.0)
    loss.backward()
    expected = torch.tensor([[0.0, -2 / 3, -2 / 3], [0.0, 1 / 3, 0.0]])
    torch.testing.assert_close(lp.grad, expected)
    assert stats.tokens == 3 and stats.sequences == 2
    assert stats.summary()["ratio_mean"] == pytest.approx(1.0) and stats.clipped == 0


def test_negative_scale_tempers_only_negative_advantages() -> None:
    lp, prox, beh = _inputs([[0.0] * 3, [0.0] * 3])
    cfg = LossConfig(tis_cap=None, negative_scale=0.25)
    loss, _ = policy_loss(lp, prox, beh, torch.tensor([2.0, -1.0]), MASK, cfg)
    # -(2 + 2 - 0.25) / 3 tokens: the normalizer still counts the negative sample's token
    assert float(loss) == pytest.approx(-3.75 / 3)
    loss.backward()
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, -2 / 3, -2 / 3], [0.0, 0.25 / 3, 0.0]]))
    lp, prox, beh = _inputs([[0.0] * 3, [0.0] * 3])
    loss, _ = policy_loss(
        lp, prox, beh, torch.tensor([2.0, -1.0]), MASK, LossConfig(tis_cap=None, negative_scale=0)
    )
    loss.backward()
    assert lp.grad[1].abs().sum() == 0  # positives only


def test_token_clip_is_asymmetric_and_only_binds_on_the_advantage_side() -> None:
    # row 0 (A = +1): ratios 1.5 (above 1 + 0.28: clipped) and 1.2 (inside)
    # row 1 (A = -1): ratio 1.5 (A < 0: the unclipped 1.5 * A is the minimum, not clipped)
    lp, prox, beh = _inputs([[0.0, LN(1.5), LN(1.2)], [0.0, LN(1.5), 0.0]])
    cfg = LossConfig(tis_cap=None, eps_low=0.2, eps_high=0.28)
    loss, stats = policy_loss(lp, prox, beh, torch.tensor([1.0, -1.0]), MASK, cfg)
    # terms: -1.28, -1.2, +1.5 over 3 tokens
    assert float(loss) == pytest.approx((-1.28 - 1.2 + 1.5) / 3, abs=1e-6)
    loss.backward()
    # d/dlp of -ratio*A/3 = -ratio*A/3, zero where clipped
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, 0.0, -1.2 / 3], [0.0, 1.5 / 3, 0.0]]))
    assert stats.clipped == 1
    # ratio 0.5 with A < 0: below 1 - eps_low, clipped
    lp, prox, beh = _inputs([[0.0, 0.0, 0.0], [0.0, LN(0.5), 0.0]])
    loss, stats = policy_loss(lp, prox, beh, torch.tensor([1.0, -1.0]), MASK, cfg)
    assert float(loss) == pytest.approx((-1 - 1 + 0.8) / 3, abs=1e-6) and stats.clipped == 1


def test_truncated_importance_weights_scale_tokens_and_cap_at_C() -> None:
    # rho = pi_trainer / pi_engine = 3 (capped to 2), 0.5 and 1
    lp, prox, beh = _inputs([[0.0] * 3, [0.0] * 3], [[0.0, LN(3.0), LN(0.5)], [0.0, 0.0, 0.0]])
    loss, stats = policy_loss(lp, prox, beh, torch.tensor([1.0, 1.0]), MASK, LossConfig(tis_cap=2.0))
    assert float(loss) == pytest.approx(-(2.0 + 0.5 + 1.0) / 3, abs=1e-6)
    assert stats.truncated == 1
    s = stats.summary()
    assert s["ratio_max"] == pytest.approx(3.0) and s["ratio_min"] == pytest.approx(0.5)
    assert s["ratio_mean"] == pytest.approx(4.5 / 3)
    # no cap: plain importance weights
    loss, _ = policy_loss(lp, prox, beh, torch.tensor([1.0, 1.0]), MASK, LossConfig(tis_cap=None))
    assert float(loss) == pytest.approx(-(1.0 + 1.0 + 1.0) / 3, abs=1e-6), "tis_cap None: weight 1"


def test_token_masking_drops_tokens_outside_the_band_but_keeps_the_normalizer() -> None:
    lp, prox, beh = _inputs([[0.0] * 3, [0.0] * 3], [[0.0, LN(3.0), LN(0.9)], [0.0, 0.0, 0.0]])
    cfg = LossConfig(tis_cap=None, mask="token", mask_low=0.5, mask_high=2.0)
    loss, stats = policy_loss(lp, prox, beh, torch.tensor([1.0, 1.0]), MASK, cfg)
    # the rho=3 token is dropped; the others keep weight 1 (no TIS); still divided by 3 tokens
    assert float(loss) == pytest.approx(-2.0 / 3, abs=1e-6)
    assert stats.masked == 1 and stats.summary()["masked_fraction"] == pytest.approx(1 / 3)


def test_sequence_masking_uses_the_geometric_mean_ratio() -> None:
    # row 0: rho 3 and 1 -> geometric mean sqrt(3) = 1.73 (inside [0.5, 1.5]? no: masked whole row)
    lp, prox, beh = _inputs([[0.0] * 3, [0.0] * 3], [[0.0, LN(3.0), 0.0], [0.0, LN(1.2), 0.0]])
    cfg = LossConfig(tis_cap=None, mask="sequence", mask_low=0.5, mask_high=1.5)
    loss, stats = policy_loss(lp, prox, beh, torch.tensor([1.0, 1.0]), MASK, cfg)
    assert float(loss) == pytest.approx(-1.0 / 3, abs=1e-6) and stats.masked == 2


def test_sequence_level_aggregations() -> None:
    lp, prox, beh = _inputs([[0.0] * 3, [0.0] * 3])
    adv = torch.tensor([2.0, -1.0])
    mean_mean = LossConfig(tis_cap=None, aggregation="seq_mean_token_mean")
    loss, _ = policy_loss(lp, prox, beh, adv, MASK, mean_mean)
    assert float(loss) == pytest.approx(-(2.0 - 1.0) / 2)  # row means 2 and -1, averaged
    mean_sum = LossConfig(tis_cap=None, aggregation="seq_mean_token_sum")
    loss, _ = policy_loss(lp, prox, beh, adv, MASK, mean_sum)
    assert float(loss) == pytest.approx(-(4.0 - 1.0) / 2)  # row sums 4 and -1, averaged


def test_gspo_sequence_ratio_is_length_normalized_and_clipped_per_sequence() -> None:
    # row 0 (A=+1): log-ratios log 1.1 on both tokens -> s = 1.1 > 1 + 0.05: clipped, no gradient
    # row 1 (A=-1): one token, log-ratio log 1.02 -> s = 1.02 inside the band
    lp, prox, beh = _inputs([[0.0, LN(1.1), LN(1.1)], [0.0, LN(1.02), 0.0]])
    cfg = LossConfig(variant="sequence", eps_low=0.05, eps_high=0.05, tis_cap=None)
    loss, stats = policy_loss(lp, prox, beh, torch.tensor([1.0, -1.0]), MASK, cfg)
    assert float(loss) == pytest.approx((-1.05 + 1.02) / 2, abs=1e-6)
    loss.backward()
    # d/dlp_t of -A * s / n_seq with s = exp(mean(lp - prox)): -A * s / (n_seq * len)
    torch.testing.assert_close(lp.grad, torch.tensor([[0.0, 0.0, 0.0], [0.0, 1.02 / 2, 0.0]]))
    assert stats.clipped == 2, "both tokens of the clipped sequence count"


def test_gspo_weight_is_the_truncated_geometric_mean_ratio() -> None:
    lp, prox, beh = _inputs([[0.0] * 3, [0.0] * 3], [[0.0, LN(4.0), LN(1.0)], [0.0, LN(9.0), 0.0]])
    cfg = LossConfig(variant="sequence", tis_cap=2.5)
    loss, stats = policy_loss(lp, prox, beh, torch.tensor([1.0, 1.0]), MASK, cfg)
    # row 0: sqrt(4 * 1) = 2; row 1: 9 capped to 2.5
    assert float(loss) == pytest.approx(-(2.0 + 2.5) / 2, abs=1e-6)
    assert stats.truncated == 1


def test_microbatches_with_global_normalizers_add_up_to_the_whole_batch() -> None:
    g = torch.Generator().manual_seed(0)
    lp0 = torch.randn(4, 6, generator=g) - 2
    prox = lp0 + 0.1 * torch.randn(4, 6, generator=g)
    beh = prox + 0.1 * torch.randn(4, 6, generator=g)
    mask = torch.rand(4, 6, generator=g) > 0.3
    mask[:, 0] = False
    adv = torch.tensor([1.0, -0.5, 0.25, -2.0])
    for cfg in (LossConfig(), LossConfig(aggregation="seq_mean_token_mean"), LossConfig(variant="sequence")):
        whole = lp0.clone().requires_grad_(True)
        loss, _ = policy_loss(whole, prox, beh, adv, mask, cfg)
        loss.backward()
        parts = lp0.clone().requires_grad_(True)
        total = 0.0
        n_tok, n_seq = int(mask.sum()), 4
        for rows in (slice(0, 1), slice(1, 4)):
            part, _ = policy_loss(
                parts[rows],
                prox[rows],
                beh[rows],
                adv[rows],
                mask[rows],
                cfg,
                num_tokens=n_tok,
                num_sequences=n_seq,
            )
            part.backward()
            total += float(part)
        assert total == pytest.approx(float(loss), abs=1e-6)
        torch.testing.assert_close(parts.grad, whole.grad)


def test_empty_mask_gives_zero_loss_with_a_graph() -> None:
    lp, prox, beh = _inputs([[0.0] * 3])
    loss, stats = policy_loss(
        lp, prox, beh, torch.tensor([1.0]), torch.zeros(1, 3, dtype=torch.bool), LossConfig()
    )
    loss.backward()
    assert float(loss) == 0.0 and stats.tokens == 0 and stats.summary()["ratio_mean"] == 1.0


def test_loss_config_rejects_an_empty_band() -> None:
    with pytest.raises(ValueError, match="mask_low"):
        LossConfig(mask_low=2.0, mask_high=1.0)
