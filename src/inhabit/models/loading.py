"""Load a LOCAL Hugging Face model folder (config, safetensors weights, tokenizer) with transformers.

Nothing is ever fetched from a model hub: every transformers call gets `local_files_only=True`
and `trust_remote_code=False`, so a folder that lacks a file fails here with a `ModelLoadError`
that names the missing piece, instead of silently downloading it (or hanging without network).

    model, tokenizer = load_model("out/moe-2m")             # fp32 on CPU, eval mode
    model, tokenizer = load_model(path, dtype="bfloat16", device="cuda")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from inhabit.errors import ModelLoadError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

DTYPES = ("float32", "bfloat16", "float16")
_WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")


def check_model_folder(path: str | Path) -> dict:
    """Validate the folder's shape and return its parsed config.json (ModelLoadError otherwise)."""
    path = Path(path)
    if not path.exists():
        raise ModelLoadError(
            f"model folder {path} does not exist (build one with `inhabit model build --out {path}`)"
        )
    if not path.is_dir():
        raise ModelLoadError(f"{path} is a file; give the folder holding config.json and the weights")
    config_file = path / "config.json"
    if not config_file.is_file():
        raise ModelLoadError(f"{path} has no config.json; it is not a Hugging Face model folder")
    try:
        config = json.loads(config_file.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ModelLoadError(f"{config_file} is not valid JSON: {e}") from e
    if not isinstance(config, dict) or "model_type" not in config:
        raise ModelLoadError(f"{config_file} has no model_type; it is not a transformers config")
    if not any(any(path.glob(p)) for p in _WEIGHT_PATTERNS):
        raise ModelLoadError(f"{path} has no weights (*.safetensors or pytorch_model*.bin)")
    if not any((path / f).is_file() for f in _TOKENIZER_FILES):
        raise ModelLoadError(f"{path} has no tokenizer files (tokenizer.json / tokenizer_config.json)")
    return config


def load_tokenizer(path: str | Path) -> PreTrainedTokenizerBase:
    """The folder's tokenizer, loaded offline."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except Exception as e:  # transformers raises many kinds (OSError, ValueError, KeyError)
        raise ModelLoadError(f"could not load the tokenizer in {path}: {e}") from e


def load_model(
    path: str | Path, *, dtype: str = "float32", device: str = "cpu"
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load `(model, tokenizer)` from a local folder; the model is in eval mode on `device`."""
    import torch
    from safetensors import SafetensorError
    from transformers import AutoConfig, AutoModelForCausalLM

    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not supported; use one of {', '.join(DTYPES)}")
    raw = check_model_folder(path)
    try:
        config = AutoConfig.from_pretrained(str(path), local_files_only=True, trust_remote_code=False)
    except (ValueError, KeyError) as e:
        raise ModelLoadError(
            f"{path}: model_type {raw.get('model_type')!r} is not an architecture this transformers "
            f"version knows ({e}); remote code is never run"
        ) from e
    except OSError as e:
        raise ModelLoadError(f"could not read the config in {path}: {e}") from e
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(path),
            config=config,
            dtype=getattr(torch, dtype),
            local_files_only=True,
            trust_remote_code=False,
        )
    except ValueError as e:
        raise ModelLoadError(
            f"{path}: architecture {raw.get('architectures')} has no causal-LM class in transformers: {e}"
        ) from e
    except (OSError, RuntimeError, SafetensorError) as e:
        raise ModelLoadError(f"could not load the weights in {path}: {e}") from e
    tokenizer = load_tokenizer(path)
    try:
        model.to(device)
    except (RuntimeError, AssertionError) as e:
        raise ModelLoadError(f"could not move the model to device {device!r}: {e}") from e
    model.eval()
    return model, tokenizer
