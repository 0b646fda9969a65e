"""Reading new weights and copying them into a loaded model in place (the engine's hot swap).

Two name layouts meet here. transformers 5 keeps a Qwen3-MoE layer's experts fused in memory
(`mlp.experts.gate_up_proj` [E, 2I, H], `mlp.experts.down_proj` [E, H, I]) but writes the
per-expert checkpoint layout to disk (`mlp.experts.{e}.gate_proj.weight`, `up_proj`, `down_proj`).
`to_model_layout` accepts either (or a mix) and fuses per-expert tensors, so a state dict read
from a model folder, one produced by a trainer, or a partial delta all load the same way.

A state dict may be partial: names it does not mention keep their values (a delta that touched a
few tensors is a valid update). Unknown names and wrong shapes raise `WeightLoadError` before
anything is copied, so a bad update never leaves the model half-written.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from inhabit.inference.errors import WeightLoadError

_EXPERT = re.compile(
    r"^(?P<prefix>.*\.experts)\.(?P<idx>\d+)\.(?P<proj>gate_proj|up_proj|down_proj)\.weight$"
)


def read_state_dict(path: str | Path) -> dict[str, torch.Tensor]:
    """All tensors of a model folder's *.safetensors files (or of one .safetensors file)."""
    from safetensors.torch import load_file

    path = Path(path)
    if path.is_file():
        files = [path]
    elif path.is_dir():
        files = sorted(path.glob("*.safetensors"))
    else:
        raise WeightLoadError(f"weights path {path} does not exist")
    if not files:
        raise WeightLoadError(f"{path} holds no *.safetensors files")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(str(f)))
        except Exception as e:  # safetensors raises its own error types for corrupt files
            raise WeightLoadError(f"could not read {f}: {e}") from e
    return state


def to_model_layout(model: nn.Module, state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Rename/fuse `state` into the names of `model.state_dict()`; check names and shapes."""
    target = model.state_dict(keep_vars=True)
    out: dict[str, torch.Tensor] = {}
    experts: dict[str, dict[int, dict[str, torch.Tensor]]] = defaultdict(lambda: defaultdict(dict))
    for name, tensor in state.items():
        m = _EXPERT.match(name)
        if name not in target and m:
            experts[m["prefix"]][int(m["idx"])][m["proj"]] = tensor
        else:
            out[name] = tensor
    for prefix, by_idx in experts.items():
        out.update(_fuse_experts(prefix, by_idx, target))
    unknown = [n for n in out if n not in target]
    if unknown:
        shown = ", ".join(unknown[:5]) + (" ..." if len(unknown) > 5 else "")
        raise WeightLoadError(f"{len(unknown)} weight names are not in the loaded model: {shown}")
    for name, tensor in out.items():
        if tuple(tensor.shape) != tuple(target[name].shape):
            raise WeightLoadError(
                f"weight {name} has shape {tuple(tensor.shape)}, the model expects {tuple(target[name].shape)}"
            )
    return out


def _fuse_experts(
    prefix: str, by_idx: dict[int, dict[str, torch.Tensor]], target: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    gate_up_name, down_name = f"{prefix}.gate_up_proj", f"{prefix}.down_proj"
    if gate_up_name not in target or down_name not in target:
        raise WeightLoadError(f"per-expert weights under {prefix} but the model has no fused experts there")
    n_experts = target[gate_up_name].shape[0]
    if sorted(by_idx) != list(range(n_experts)) or any(len(p) != 3 for p in by_idx.values()):
        # A partial expert update would need the other experts' current values; ask for all.
        raise WeightLoadError(
            f"{prefix}: give gate/up/down weights of all {n_experts} experts together (or the fused tensors)"
        )
    gate_up = torch.stack(
        [torch.cat([by_idx[e]["gate_proj"], by_idx[e]["up_proj"]], 0) for e in range(n_experts)]
    )
    down = torch.stack([by_idx[e]["down_proj"] for e in range(n_experts)])
    return {gate_up_name: gate_up, down_name: down}


@torch.no_grad()
def copy_into(model: nn.Module, state: Mapping[str, torch.Tensor]) -> int:
    """Copy an already checked model-layout state dict into the model's tensors; return the count."""
    target = model.state_dict(keep_vars=True)
    for name, tensor in state.items():
        dst = target[name]
        dst.copy_(tensor.to(device=dst.device, dtype=dst.dtype))
    return len(state)
