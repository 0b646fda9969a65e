"""LoRA training through peft: adapters on the model's linear projections, merged for everyone else.

With `[trainer.lora]` set, the `Trainer` injects peft LoRA layers into its model in place
(`peft.inject_adapter_in_model`: the model keeps its own class and module tree, each targeted
`nn.Linear` becomes a `LoraLayer` around it) and only the adapters' A and B matrices train; the
base weights are frozen. Everything outside the trainer sees the merged model:

* `merged_state_dict`: the weights in the base model's names, each LoRA-wrapped projection as
  W + (alpha / rank) * B @ A. This is what `Trainer.state_dict_for_engine` returns, so the weight
  store publishes the merged model (a delta against the previous version touches only the
  wrapped projections; embeddings and norms do not change) and any engine applies it as it
  applies any new version, every token still tagged with the policy version that produced it.
* `adapter_state_dict`: the adapter alone in peft's file layout (`base_model.model.<module>.lora_A.weight`),
  what `save_adapter` writes beside an `adapter_config.json`: a folder peft's `PeftModel` and
  vLLM's LoRA loader take as they are.

A checkpoint of a LoRA trainer (checkpoint.py) is the merged servable folder, plus `adapter/`
(`save_adapter`) and `lora_base/model.safetensors` (the frozen base weights of the wrapped
projections, which the merged folder no longer holds), so a resume restores base and adapter
exactly whatever folder the trainer was rebuilt from.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from pydantic import Field

from inhabit.config import Config
from inhabit.errors import TrainerError

ADAPTER_DIR = "adapter"
"""Checkpoint sub-folder holding the peft adapter (adapter_config.json, adapter_model.safetensors)."""
BASE_FILE = "lora_base/model.safetensors"
"""Checkpoint file holding the frozen base weights of the LoRA-wrapped projections."""
ADAPTER_NAME = "default"
_PEFT_PREFIX = "base_model.model."


class LoraSettings(Config):
    """`[trainer.lora]`: low-rank adapters instead of full fine-tuning (absent: full fine-tuning)."""

    rank: int = Field(8, ge=1, le=4096, description="Rank r of each adapter (A: r x in, B: out x r).")
    alpha: float = Field(
        16.0, gt=0.0, description="Scale numerator: the update added to W is (alpha / rank) * B @ A."
    )
    dropout: float = Field(
        0.0,
        ge=0.0,
        lt=1.0,
        description="Dropout on the adapters' input while training (0 keeps the trainer's logprobs "
        "those of the weights the engine runs).",
    )
    targets: list[str] | None = Field(
        None,
        min_length=1,
        description="Module names to wrap (a name matches every module whose path ends with it, e.g. "
        "'q_proj'); None: every linear projection of the decoder (the LM head excluded).",
    )


def lora_config(settings: LoraSettings) -> Any:
    """The peft `LoraConfig` of `settings`."""
    from peft import LoraConfig

    return LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=settings.dropout,
        target_modules=list(settings.targets) if settings.targets else "all-linear",
        bias="none",
    )


def inject(model: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """Wrap `model`'s target projections in LoRA layers, in place; only adapters stay trainable.
    Raises TrainerError when no module matches `settings.targets`."""
    from peft import inject_adapter_in_model

    try:
        model = inject_adapter_in_model(lora_config(settings), model, adapter_name=ADAPTER_NAME)
    except ValueError as e:  # peft: "Target modules {...} not found in the base model"
        raise TrainerError(f"trainer.lora.targets: {str(e).splitlines()[0]}") from e
    if not lora_layers(model):
        raise TrainerError(f"trainer.lora.targets {settings.targets} match no linear layer of the model")
    return model


def is_lora(model: torch.nn.Module) -> bool:
    """Whether `model` carries injected LoRA layers."""
    return bool(lora_layers(model))


def lora_layers(model: torch.nn.Module) -> dict[str, Any]:
    """{module path: LoraLayer} of every wrapped projection."""
    from peft.tuners.lora import LoraLayer

    return {name: m for name, m in model.named_modules() if isinstance(m, LoraLayer)}


def base_name(name: str) -> str:
    """A state-dict name of the wrapped model in the base model's names (`.base_layer.` dropped)."""
    return name.replace(".base_layer.", ".")


@torch.no_grad()
def merged_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Detached CPU copies of the weights in the base model's names, the adapters merged in."""
    merged = {}
    for path, layer in lora_layers(model).items():
        weight = layer.get_base_layer().weight
        merged[f"{path}.weight"] = weight + layer.get_delta_weight(ADAPTER_NAME).to(weight.dtype)
    out = {}
    for name, tensor in model.state_dict().items():
        if ".lora_" in name:
            continue
        name = base_name(name)
        out[name] = merged.get(name, tensor).detach().to("cpu", copy=True)
    return out


@torch.no_grad()
def base_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The frozen base weights (and biases) of the wrapped projections, in the base model's names."""
    out = {}
    for path, layer in lora_layers(model).items():
        for key, tensor in layer.get_base_layer().state_dict().items():
            out[f"{path}.{key}"] = tensor.detach().to("cpu", copy=True).contiguous()
    return out


def adapter_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The adapter's tensors in peft's saved layout (`base_model.model.<module>.lora_A.weight`)."""
    from peft import get_peft_model_state_dict

    state = get_peft_model_state_dict(model, adapter_name=ADAPTER_NAME)
    return {_PEFT_PREFIX + k: v.detach().to("cpu", copy=True).contiguous() for k, v in state.items()}


def save_adapter(model: torch.nn.Module, settings: LoraSettings, path: str | Path) -> Path:
    """Write a peft adapter folder (adapter_config.json + adapter_model.safetensors) at `path`."""
    from safetensors.torch import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    config = lora_config(settings)
    config.target_modules = sorted({p.rsplit(".", 1)[-1] for p in lora_layers(model)})
    base = getattr(getattr(model, "config", None), "_name_or_path", None)
    config.base_model_name_or_path = str(base) if base else None
    config.save_pretrained(str(path))
    save_file(adapter_state_dict(model), str(path / "adapter_model.safetensors"), metadata={"format": "pt"})
    return path


def load_adapter(model: torch.nn.Module, path: str | Path) -> None:
    """Copy the adapter folder at `path` (save_adapter's) into `model`'s LoRA layers, checking that
    every adapter tensor of the model is there with its shape."""
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    path = Path(path)
    file = path / "adapter_model.safetensors"
    if not file.is_file():
        raise TrainerError(f"{path} holds no adapter_model.safetensors")
    saved = json.loads((path / "adapter_config.json").read_text())
    state = {k.removeprefix(_PEFT_PREFIX): v for k, v in load_file(str(file)).items()}
    want = {k: v.shape for k, v in adapter_state_dict(model).items()}
    want = {k.removeprefix(_PEFT_PREFIX): s for k, s in want.items()}
    if set(state) != set(want) or any(state[k].shape != s for k, s in want.items()):
        raise TrainerError(
            f"the adapter at {path} (rank {saved.get('r')}, targets {saved.get('target_modules')}) "
            "does not fit this trainer's [trainer.lora]"
        )
    result = set_peft_model_state_dict(model, state, adapter_name=ADAPTER_NAME)
    if getattr(result, "unexpected_keys", None):
        raise TrainerError(f"the adapter at {path} has unknown tensors, e.g. {result.unexpected_keys[:3]}")


@torch.no_grad()
def load_base(model: torch.nn.Module, weights: Mapping[str, torch.Tensor]) -> int:
    """Copy weights given in the base model's names into the wrapped model: `*.base_layer.*` for
    the wrapped projections, the others as they are. Returns the count copied; unknown names raise."""
    target = model.state_dict(keep_vars=True)
    by_base = {base_name(n): t for n, t in target.items() if ".lora_" not in n}
    unknown = [n for n in weights if n not in by_base]
    if unknown:
        raise TrainerError(f"{len(unknown)} weights do not fit the model, e.g. {unknown[:3]}")
    for name, tensor in weights.items():
        dst = by_base[name]
        if tuple(dst.shape) != tuple(tensor.shape):
            raise TrainerError(f"weight {name} has shape {tuple(tensor.shape)}, the model {tuple(dst.shape)}")
        dst.copy_(tensor.to(device=dst.device, dtype=dst.dtype))
    return len(weights)


def trainable_parameters(model: torch.nn.Module) -> tuple[int, int]:
    """(trainable, total) parameter counts, tied tensors once."""
    seen: dict[int, torch.nn.Parameter] = {p.data_ptr(): p for p in model.parameters()}
    return sum(p.numel() for p in seen.values() if p.requires_grad), sum(p.numel() for p in seen.values())
