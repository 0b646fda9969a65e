"""Fixtures for weight-sync tests: real training versions of a tiny model, and stores."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inhabit.weights.bits import tensor_to_bits


def train_versions(steps: int, lr: float = 1e-5, preset: str = "dense-1m", seed: int = 0) -> list[dict]:
    """State dicts (fp32 master weights) after 0..steps AdamW steps on random token batches."""
    from inhabit.models.tiny import build_tiny_model

    model = build_tiny_model(preset, seed=seed)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    versions = [{k: v.detach().clone() for k, v in model.state_dict().items()}]
    for _ in range(steps):
        x = torch.randint(0, vocab, (2, 16), generator=gen)
        model(input_ids=x, labels=x).loss.backward()
        opt.step()
        opt.zero_grad()
        versions.append({k: v.detach().clone() for k, v in model.state_dict().items()})
    return versions


def bf16_bits(state: dict) -> dict[str, np.ndarray]:
    """What an engine running bf16 should hold for `state`, as bit patterns."""
    return {k: tensor_to_bits(v.to(torch.bfloat16))[0] for k, v in state.items()}


def assert_same_weights(got: dict[str, torch.Tensor], state: dict) -> None:
    want = bf16_bits(state)
    assert got.keys() == want.keys()
    for name, bits in want.items():
        assert np.array_equal(tensor_to_bits(got[name])[0], bits), name


@pytest.fixture(scope="session")
def versions() -> list[dict]:
    return train_versions(8)


@pytest.fixture(params=["local", "memory"])
def any_store_url(request, tmp_path) -> str:
    """A fresh store on each backend (for the tests where the backend matters most)."""
    if request.param == "local":
        return str(tmp_path / "store")
    import uuid

    return f"memory://weights-test-{uuid.uuid4().hex}"


@pytest.fixture
def store_url() -> str:
    """A fresh in-memory store (the other tests; local disks are covered by any_store_url)."""
    import uuid

    return f"memory://weights-test-{uuid.uuid4().hex}"
