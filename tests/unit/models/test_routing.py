"""Router capture during generation and exact replay in a later forward pass (tiny Qwen3-MoE)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inhabit.models.loading import load_model
from inhabit.models.routing import (
    RoutingCapture,
    RoutingError,
    RoutingReplay,
    layer_major,
    moe_layers,
    routers,
    token_major,
)

PROMPT_LEN, NEW = 10, 16


def _generate(model, seed: int = 0):
    """Sampled generation with a KV cache, capturing routing; returns (sequence, step logits, capture)."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(10, 4000, (1, PROMPT_LEN), generator=gen)
    torch.manual_seed(seed)
    with RoutingCapture(model) as cap:
        out = model.generate(
            prompt,
            max_new_tokens=NEW,
            min_new_tokens=NEW,
            do_sample=True,
            top_k=0,
            temperature=1.0,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=2,
        )
    return out.sequences, torch.cat(out.logits), cap


def test_moe_layers_found(moe_model, tiny_dense_dir) -> None:
    assert len(moe_layers(moe_model)) == moe_model.config.num_hidden_layers == 2
    assert all(type(r).__name__ == "Qwen3MoeTopKRouter" for r in routers(moe_model))
    dense, _ = load_model(tiny_dense_dir)
    assert moe_layers(dense) == []
    with pytest.raises(RoutingError, match="no top-k MoE router"):
        RoutingCapture(dense)


def test_capture_records_prefill_then_one_token_per_decode_step(moe_model) -> None:
    seq, _, cap = _generate(moe_model)
    k = moe_model.config.num_experts_per_tok
    assert cap.calls[0].shape == (2, 1, PROMPT_LEN, k)
    assert all(c.shape == (2, 1, 1, k) for c in cap.calls[1:])
    ids = cap.expert_ids(0)
    # The last sampled token is never fed back, so it has no routing.
    assert ids.shape == (2, seq.shape[1] - 1, k)
    assert ids.min() >= 0 and ids.max() < moe_model.config.num_experts
    assert (ids[..., 0] != ids[..., 1]).all(), "top-k ids of one token are distinct"
    # The router's own forward is back once the capture exits.
    assert all("forward" not in r.__dict__ for r in routers(moe_model))


def test_replay_in_a_full_forward_matches_generation_exactly(moe_model) -> None:
    seq, step_logits, cap = _generate(moe_model)
    recorded = cap.expert_ids(0)
    inputs = seq[:, :-1]
    with torch.no_grad(), RoutingReplay(moe_model, recorded) as replay, RoutingCapture(moe_model) as seen:
        logits = moe_model(inputs).logits[0]
    assert replay.consumed == inputs.shape[1]
    assert torch.equal(seen.expert_ids(0), recorded), "replayed experts must equal the recorded ones"
    # Logits of each generated position equal the engine's (KV-cached) logits in fp32.
    torch.testing.assert_close(logits[PROMPT_LEN - 1 :], step_logits, rtol=0, atol=1e-4)
    logp_gen = torch.log_softmax(step_logits, -1).gather(1, seq[0, PROMPT_LEN:, None])
    logp_full = torch.log_softmax(logits[PROMPT_LEN - 1 :], -1).gather(1, seq[0, PROMPT_LEN:, None])
    assert (logp_gen - logp_full).abs().max() < 1e-4


def test_replay_of_the_routers_own_choice_is_bit_identical(moe_model) -> None:
    ids = torch.randint(10, 4000, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), RoutingCapture(moe_model) as cap:
        free = moe_model(ids).logits
    with torch.no_grad(), RoutingReplay(moe_model, cap.calls[0]):  # (layers, batch, seq, k)
        replayed = moe_model(ids).logits
    assert torch.equal(free, replayed)


def test_replay_forces_recorded_routing_after_weights_change(moe_model) -> None:
    seq, _, cap = _generate(moe_model)
    recorded = cap.expert_ids(0)
    inputs = seq[:, :-1]
    with torch.no_grad():
        for r in routers(moe_model):
            r.weight.add_(torch.randn(r.weight.shape, generator=torch.Generator().manual_seed(5)) * 0.5)
    with torch.no_grad(), RoutingCapture(moe_model) as free:
        moe_model(inputs)
    differs = (free.expert_ids(0) != recorded).any(-1).float().mean()
    assert differs > 0.2, "perturbed routers should route many tokens differently"
    with torch.no_grad(), RoutingReplay(moe_model, recorded), RoutingCapture(moe_model) as forced:
        moe_model(inputs)
    assert torch.equal(forced.expert_ids(0), recorded)


def test_gradients_reach_the_router_under_replay(moe_model) -> None:
    seq, _, cap = _generate(moe_model)
    recorded = cap.expert_ids(0)
    moe_model.train()
    moe_model.zero_grad()
    with RoutingReplay(moe_model, recorded):
        out = moe_model(seq[:, :-1], labels=seq[:, :-1])
    out.loss.backward()
    for block in moe_layers(moe_model):
        assert block.gate.weight.grad is not None and block.gate.weight.grad.abs().sum() > 0
        grad = block.experts.gate_up_proj.grad
        used = recorded.unique()
        assert grad[used].abs().sum() > 0


def test_minus_one_means_free_routing(moe_model) -> None:
    ids = torch.randint(10, 4000, (1, 8), generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), RoutingCapture(moe_model) as cap:
        moe_model(ids)
    own = cap.expert_ids(0)
    n_exp = moe_model.config.num_experts
    forced = (own + 1) % n_exp  # different experts everywhere ...
    forced[:, :3] = -1  # ... except the first three tokens, left free
    with torch.no_grad(), RoutingReplay(moe_model, forced), RoutingCapture(moe_model) as seen:
        moe_model(ids)
    got = seen.expert_ids(0)
    assert torch.equal(got[:, :3], own[:, :3])
    assert torch.equal(got[:, 3:], forced[:, 3:])


def test_replay_step_by_step_in_a_cached_decode(moe_model) -> None:
    seq, step_logits, cap = _generate(moe_model)
    # Replaying the recorded ids through the same prefill + decode calls reproduces the logits.
    with torch.no_grad(), RoutingReplay(moe_model, cap.expert_ids(0)) as replay:
        out = moe_model(seq[:, :PROMPT_LEN], use_cache=True)
        logits = [out.logits[0, -1]]
        past = out.past_key_values
        for t in range(PROMPT_LEN, seq.shape[1] - 1):
            out = moe_model(seq[:, t : t + 1], past_key_values=past, use_cache=True)
            past = out.past_key_values
            logits.append(out.logits[0, -1])
    assert replay.consumed == seq.shape[1] - 1
    torch.testing.assert_close(torch.stack(logits), step_logits, rtol=0, atol=1e-5)


def test_replay_validates_ids(moe_model) -> None:
    k = moe_model.config.num_experts_per_tok
    with pytest.raises(RoutingError, match="MoE layers"):
        RoutingReplay(moe_model, torch.zeros(3, 4, k, dtype=torch.long))
    with pytest.raises(RoutingError, match="out of range"):
        RoutingReplay(moe_model, torch.full((2, 4, k), 99))
    with pytest.raises(RoutingError, match=r"\(layers, tokens, k\)"):
        RoutingReplay(moe_model, torch.zeros(2, k, dtype=torch.long))
    with (
        pytest.raises(RoutingError, match="ran out"),
        torch.no_grad(),
        RoutingReplay(moe_model, torch.zeros(2, 4, k, dtype=torch.long)),
    ):
        moe_model(torch.ones(1, 5, dtype=torch.long))
    with (
        pytest.raises(RoutingError, match="batch"),
        torch.no_grad(),
        RoutingReplay(moe_model, torch.zeros(2, 3, 4, k, dtype=torch.long)),
    ):
        moe_model(torch.ones(2, 4, dtype=torch.long))
    # After errors inside the context, the routers are restored.
    assert all("forward" not in r.__dict__ for r in routers(moe_model))


def test_nesting_and_layout_helpers(moe_model) -> None:
    ids = torch.ones(1, 4, dtype=torch.long)
    with torch.no_grad(), RoutingCapture(moe_model) as outer:
        moe_model(ids)
        with RoutingCapture(moe_model) as inner:
            moe_model(ids)
        first = RoutingReplay(moe_model, inner.expert_ids(0))
        with (
            first,
            pytest.raises(RoutingError, match="already active"),
            RoutingReplay(moe_model, inner.expert_ids(0)),
        ):
            pass
    assert len(outer.calls) == 2 and len(inner.calls) == 1
    assert all("forward" not in r.__dict__ for r in routers(moe_model))
    recorded = outer.expert_ids(0)
    per_token = token_major(recorded)
    assert len(per_token) == 8 and len(per_token[0]) == 2 and len(per_token[0][0]) == 2
    assert torch.equal(layer_major(per_token), recorded)
    assert outer.clear() and outer.calls == []


def test_replay_under_activation_checkpointing_gives_the_same_gradients(moe_model) -> None:
    ids = torch.randint(10, 4000, (2, 10), generator=torch.Generator().manual_seed(3))
    with torch.no_grad(), RoutingCapture(moe_model) as cap:
        moe_model(ids)
    recorded = cap.calls[0]
    with torch.no_grad():  # make free routing disagree with the recording
        for r in routers(moe_model):
            r.weight.add_(torch.randn(r.weight.shape, generator=torch.Generator().manual_seed(4)))
    moe_model.train()

    def grads() -> dict[str, torch.Tensor]:
        moe_model.zero_grad()
        with RoutingReplay(moe_model, recorded), RoutingCapture(moe_model) as seen:
            moe_model(ids, labels=ids).loss.backward()
        assert len(seen.calls) == 1, "recomputation in backward is not a new forward call"
        return {n: p.grad.clone() for n, p in moe_model.named_parameters() if p.grad is not None}

    plain = grads()
    moe_model.activation_checkpointing_enable()
    checkpointed = grads()
    assert plain.keys() == checkpointed.keys()
    for name in plain:
        torch.testing.assert_close(checkpointed[name], plain[name], rtol=1e-5, atol=1e-7, msg=name)

    # Backward after leaving the block would recompute with free routing: refused loudly.
    with pytest.raises(RoutingError, match="inside the `with"), RoutingReplay(moe_model, recorded):
        moe_model(ids, labels=ids)
    moe_model.activation_checkpointing_disable()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_forced_ids_are_the_ones_used(moe_model, data) -> None:
    n_exp, k = moe_model.config.num_experts, moe_model.config.num_experts_per_tok
    batch = data.draw(st.integers(1, 2))
    seq = data.draw(st.integers(1, 6))
    rows = st.lists(st.integers(0, n_exp - 1), min_size=k, max_size=k, unique=True)
    forced = torch.tensor(data.draw(st.lists(rows, min_size=2 * batch * seq, max_size=2 * batch * seq)))
    forced = forced.reshape(2, batch, seq, k)
    ids = torch.randint(10, 4000, (batch, seq), generator=torch.Generator().manual_seed(seq))
    with torch.no_grad(), RoutingReplay(moe_model, forced), RoutingCapture(moe_model) as seen:
        moe_model(ids)
    assert torch.equal(seen.calls[0], forced)
