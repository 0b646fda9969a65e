"""Data-parallel training over torch.distributed: FSDP2 sharding, the sample split, full state dicts.

A `Trainer` built while a process group of more than one rank is up (see
inhabit.placement.trainer_dist for who starts it) trains data-parallel: every rank holds the same
global list of samples, takes its share (`balance`: longest first, each to the rank with the fewest
tokens so far), and the step's normalizers (generated tokens, samples) stay those of the whole
batch, so the sum of the ranks' losses is the one-process loss. The model is sharded with FSDP2
(`fully_shard` on every decoder layer, then on a root that holds embeddings, final norm and LM
head); gradients are reduce-scattered as a SUM (divide factor 1) because each rank's loss is
already divided by the global count. gloo on CPU, NCCL on CUDA: the same code.

FSDP runs a collective for every layer of every forward and backward, so all ranks must run the
same number of forwards: a rank with fewer micro-batches than the busiest one pads with empty ones
(two padding tokens, no loss token; their gradient is zero). Control messages (samples, metrics)
travel on a separate gloo group, whatever the backend of the compute group.

Checkpoints stay one Hugging Face folder plus `optimizer.pt` in the one-process layout: every rank
takes part in gathering full tensors (`DTensor.full_tensor`), rank 0 writes; on load every rank
reads the same files and keeps its own shard (`distribute_tensor(..., src_data_rank=None)` slices
locally, no communication). So a checkpoint of N ranks resumes on M ranks, or on one process.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from inhabit.trainer.samples import Sample


@dataclass
class DataParallel:
    """This rank's place in the group, and the gloo group for control messages."""

    rank: int
    world_size: int
    control: Any
    """A gloo process group (objects, counts), also when the compute group is NCCL."""

    def all_max(self, value: int) -> int:
        t = torch.tensor([value], dtype=torch.long)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.control)
        return int(t.item())

    def all_sum(self, value: float) -> float:
        t = torch.tensor([value], dtype=torch.float64)
        dist.all_reduce(t, group=self.control)
        return float(t.item())

    def gather(self, obj: Any) -> list[Any]:
        out: list[Any] = [None] * self.world_size
        dist.all_gather_object(out, obj, group=self.control)
        return out

    def broadcast(self, obj: Any = None) -> Any:
        """Rank 0's `obj` on every rank."""
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self.control)
        return box[0]


def current() -> DataParallel | None:
    """The data-parallel group of this process, or None outside one (or in a group of one)."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
        return None
    global _CONTROL
    if _CONTROL is None:
        _CONTROL = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else dist.group.WORLD
    return DataParallel(dist.get_rank(), dist.get_world_size(), _CONTROL)


_CONTROL: Any = None


def reset() -> None:
    """Forget the control group (call after `destroy_process_group`)."""
    global _CONTROL
    _CONTROL = None


def balance(samples: Sequence[Sample], world_size: int) -> list[list[int]]:
    """Indices of `samples` per rank, balanced by token count (longest first, to the lightest rank;
    ties to the lower rank): deterministic, the same on every rank."""
    loads = [0] * world_size
    parts: list[list[int]] = [[] for _ in range(world_size)]
    for i in sorted(range(len(samples)), key=lambda i: (-samples[i].num_tokens, i)):
        r = min(range(world_size), key=lambda r: (loads[r], r))
        parts[r].append(i)
        loads[r] += samples[i].num_tokens
    return [sorted(p) for p in parts]


def empty_sample(pad_token_id: int, routes_shape: tuple[int, ...] | None = None) -> Sample:
    """Two padding tokens and no loss token: the forward a rank runs to keep FSDP's collectives in
    step when it has fewer micro-batches than another rank."""
    routes = None if routes_shape is None else torch.full((2, *routes_shape), -1, dtype=torch.long)
    return Sample(
        input_ids=torch.full((2,), pad_token_id, dtype=torch.long),
        loss_mask=torch.zeros(2, dtype=torch.bool),
        behaviour_logprobs=torch.zeros(2),
        versions=torch.full((2,), -1, dtype=torch.long),
        advantage=0.0,
        routed_experts=routes,
        source="padding",
    )


class Scorer(torch.nn.Module):
    """The trainer's forward as one module: the base model, then the LM head on the selected positions
    only. FSDP2's root is this module, so its forward is the one that unshards the root parameters
    (embeddings, final norm, LM head) and waits for their gradients."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor, sel: torch.Tensor
    ) -> torch.Tensor:
        base = getattr(self.model, self.model.base_model_prefix)
        hidden = base(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).last_hidden_state
        return self.model.get_output_embeddings()(hidden[:, :-1][sel])


def shard(scorer: Scorer) -> None:
    """FSDP2 over `scorer`: each decoder layer its own unit, then the root; gradients summed."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    model = scorer.model
    layers = getattr(getattr(model, model.base_model_prefix), "layers", None)
    if layers is None:
        raise TypeError(f"{type(model).__name__} has no decoder `layers` to shard")
    # The mesh on the model's device type (FSDP's default picks CUDA whenever there is one).
    mesh = init_device_mesh(next(model.parameters()).device.type, (dist.get_world_size(),))
    for layer in layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(scorer, mesh=mesh)
    for m in scorer.modules():
        if isinstance(m, FSDPModule):
            m.set_gradient_divide_factor(1.0)
            m.set_force_sum_reduction_for_comms(True)  # gloo has no PREMUL_SUM


def _full(t: Any) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.full_tensor() if isinstance(t, DTensor) else t


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Every weight in full, on CPU (a collective: every rank calls it; tied names share a tensor)."""
    out: dict[str, torch.Tensor] = {}
    seen: dict[int, torch.Tensor] = {}
    for name, t in model.state_dict(keep_vars=True).items():
        if id(t) not in seen:
            seen[id(t)] = _full(t.detach()).to("cpu", copy=True)
        out[name] = seen[id(t)]
    return out


def full_optimizer_state(optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's state dict with full tensors, in the one-process layout (a collective)."""
    sd = optimizer.state_dict()
    state = {i: {k: _full(v).to("cpu", copy=True) if torch.is_tensor(v) else v for k, v in s.items()}
             for i, s in sd["state"].items()}  # fmt: skip
    return {"state": state, "param_groups": sd["param_groups"]}


def _like(full: torch.Tensor, param: Any) -> Any:
    """`full` as a shard placed like `param` (a DTensor) when it has the parameter's shape."""
    from torch.distributed.tensor import DTensor, distribute_tensor

    if isinstance(param, DTensor) and tuple(full.shape) == tuple(param.shape):
        return distribute_tensor(
            full.to(param.device, param.dtype), param.device_mesh, param.placements, src_data_rank=None
        )
    return full


def load_full_state_dict(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> None:
    """Copy full weights into a sharded model, each rank keeping its shard (no communication)."""
    with torch.no_grad():
        for name, t in model.state_dict(keep_vars=True).items():
            if name in weights:
                t.copy_(_like(weights[name], t))


def shard_optimizer_state(optimizer: torch.optim.Optimizer, full: dict[str, Any]) -> dict[str, Any]:
    """A one-process optimizer state dict (as `full_optimizer_state` writes) cut to this rank's shards."""
    params = [p for g in optimizer.param_groups for p in g["params"]]
    state = {int(i): {k: _like(v, params[int(i)]) if torch.is_tensor(v) else v for k, v in s.items()}
             for i, s in full["state"].items()}  # fmt: skip
    return {"state": state, "param_groups": full["param_groups"]}
