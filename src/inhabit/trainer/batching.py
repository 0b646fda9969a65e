"""Micro-batches under a token budget, and right-padded tensors for one forward pass.

A train step takes any number of samples; memory is bounded by packing them into micro-batches
whose padded size (rows x longest row) stays within `token_budget`, then accumulating gradients.
Samples are packed longest first so that rows of one micro-batch have similar lengths (little
padding). A sample longer than the budget gets a micro-batch of its own (it cannot be split: its
tokens attend to each other). The packing is deterministic, which exact resume relies on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from inhabit.trainer.samples import Sample


def pack_microbatches(samples: Sequence[Sample], token_budget: int) -> list[list[int]]:
    """Indices of `samples` grouped so that len(group) * longest <= token_budget (or one sample)."""
    order = sorted(range(len(samples)), key=lambda i: (-samples[i].num_tokens, i))
    batches: list[list[int]] = []
    for i in order:
        if batches:
            longest = samples[batches[-1][0]].num_tokens  # the first is the longest (sorted)
            if (len(batches[-1]) + 1) * longest <= token_budget:
                batches[-1].append(i)
                continue
        batches.append([i])
    return batches


@dataclass(frozen=True)
class MicroBatch:
    """Right-padded tensors of a few samples: [B, T] (routes [B, T, layers, k])."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    loss_mask: torch.Tensor
    behaviour_logprobs: torch.Tensor
    versions: torch.Tensor
    advantages: torch.Tensor
    """[B] float32."""
    routed_experts: torch.Tensor | None
    """-1 where the route is unknown or the position is padding (route freely)."""

    @property
    def num_rows(self) -> int:
        return int(self.input_ids.shape[0])

    def to(self, device: str | torch.device) -> MicroBatch:
        if torch.device(device) == self.input_ids.device:
            return self
        return MicroBatch(
            *(
                None if (t := getattr(self, f.name)) is None else t.to(device)
                for f in dataclasses.fields(self)
            )
        )


def collate(samples: Sequence[Sample], pad_token_id: int = 0) -> MicroBatch:
    """Stack samples into right-padded tensors (padding: attention 0, loss mask False, route -1)."""
    assert samples, "collate needs at least one sample"
    b, t = len(samples), max(s.num_tokens for s in samples)
    ids = torch.full((b, t), pad_token_id, dtype=torch.long)
    attn = torch.zeros((b, t), dtype=torch.long)
    loss = torch.zeros((b, t), dtype=torch.bool)
    beh = torch.zeros((b, t), dtype=torch.float32)
    ver = torch.full((b, t), -1, dtype=torch.long)
    shapes = {tuple(s.routed_experts.shape[1:]) for s in samples if s.routed_experts is not None}
    if len(shapes) > 1:
        raise ValueError(f"samples of one batch have routes of different shapes {sorted(shapes)}")
    routes = torch.full((b, t, *shapes.pop()), -1, dtype=torch.long) if shapes else None
    for i, s in enumerate(samples):
        n = s.num_tokens
        ids[i, :n] = s.input_ids
        attn[i, :n] = 1
        loss[i, :n] = s.loss_mask
        beh[i, :n] = s.behaviour_logprobs
        ver[i, :n] = s.versions
        if routes is not None and s.routed_experts is not None:
            routes[i, :n] = s.routed_experts
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    return MicroBatch(ids, attn, loss, beh, ver, adv, routes)
