"""Weight swaps: per-expert checkpoint names fuse into transformers 5's in-memory layout."""

from __future__ import annotations

import pytest
import torch

from inhabit.inference.errors import WeightLoadError
from inhabit.inference.weights_io import copy_into, read_state_dict, to_model_layout


def test_folder_state_dict_loads_like_from_pretrained(moe_model, moe_folder_b):
    from inhabit.models.loading import load_model

    want, _ = load_model(moe_folder_b)
    disk = read_state_dict(moe_folder_b)
    assert any(".experts.0.gate_proj.weight" in k for k in disk), "checkpoint layout is per expert"
    copy_into(moe_model, to_model_layout(moe_model, disk))
    for (name, a), (_, b) in zip(moe_model.state_dict().items(), want.state_dict().items(), strict=True):
        assert torch.equal(a, b), name


def test_partial_updates_and_bad_names(dense_model):
    name = "model.norm.weight"
    n = copy_into(
        dense_model, to_model_layout(dense_model, {name: torch.full_like(dense_model.model.norm.weight, 2)})
    )
    assert n == 1 and bool((dense_model.model.norm.weight == 2).all())
    with pytest.raises(WeightLoadError, match="not in the loaded model"):
        to_model_layout(dense_model, {"model.nope.weight": torch.zeros(1)})
    with pytest.raises(WeightLoadError, match="shape"):
        to_model_layout(dense_model, {name: torch.zeros(3)})
    with pytest.raises(WeightLoadError, match="does not exist"):
        read_state_dict("/nonexistent/folder")
