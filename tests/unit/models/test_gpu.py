"""The same capture/replay contract on a CUDA device (skipped without one)."""

from __future__ import annotations

import pytest
import torch

from inhabit.models.loading import load_model
from inhabit.models.routing import RoutingCapture, RoutingReplay


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_capture_and_replay_on_cuda(tiny_moe_dir, dtype: str) -> None:
    model, _ = load_model(tiny_moe_dir, dtype=dtype, device="cuda")
    assert next(model.parameters()).device.type == "cuda"
    ids = torch.randint(10, 4000, (2, 24), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    with torch.no_grad(), RoutingCapture(model) as cap:
        free = model(ids).logits
    with torch.no_grad(), RoutingReplay(model, cap.calls[0]), RoutingCapture(model) as seen:
        replayed = model(ids).logits
    assert torch.equal(seen.calls[0], cap.calls[0])
    assert torch.equal(free, replayed)
