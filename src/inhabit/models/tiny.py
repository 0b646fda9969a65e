"""Tiny dense and mixture-of-experts models built from a config, for tests, benchmarks and demos.

Two architectures, both ordinary transformers models so that anything which loads a Hugging Face
folder (transformers, vLLM) loads ours:

* `dense`: Qwen3-style (`Qwen3ForCausalLM`): GQA attention with q/k norms, SwiGLU MLP, RoPE.
* `moe`: Qwen3-MoE-style (`Qwen3MoeForCausalLM`): the same attention, and in every layer a sparse
  block of `num_experts` SwiGLU experts of which a softmax router picks `num_experts_per_tok`.

Models are built with random init in fp32 on CPU (bf16 is several times slower on this class of
CPU), deterministically per seed, without touching the caller's global RNG state. Named presets
span about 1M to 100M parameters with the default 4096-token tokenizer:

    model = build_tiny_model("moe-2m", vocab_size=len(tokenizer), seed=0)
    save_model_folder(model, tokenizer, "out/moe-2m")   # config.json, model.safetensors, tokenizer

`count_parameters` reports total and, for MoE, active parameters per token.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, model_validator

from inhabit.config import Config
from inhabit.errors import ConfigError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


class TinyModelSpec(Config):
    """Shape of a tiny model. `head_dim` is `hidden_size // num_heads`."""

    arch: Literal["dense", "moe"] = Field("dense", description="dense = Qwen3, moe = Qwen3-MoE")
    hidden_size: int = Field(128, ge=8, le=8192, description="Residual stream width.")
    num_layers: int = Field(2, ge=1, le=128, description="Decoder layers.")
    num_heads: int = Field(4, ge=1, le=128, description="Query heads.")
    num_kv_heads: int = Field(2, ge=1, le=128, description="Key/value heads (divides num_heads).")
    intermediate_size: int = Field(384, ge=1, description="Dense MLP width (dense layers only).")
    vocab_size: int = Field(4096, ge=16, le=1_000_000, description="Embedding rows (>= tokenizer size).")
    max_position_embeddings: int = Field(4096, ge=16, description="Longest sequence RoPE is set up for.")
    num_experts: int = Field(8, ge=1, le=1024, description="Experts per MoE layer (moe only).")
    num_experts_per_tok: int = Field(2, ge=1, description="Experts the router picks per token (moe only).")
    moe_intermediate_size: int = Field(128, ge=1, description="Width of each expert's MLP (moe only).")
    norm_topk_prob: bool = Field(True, description="Renormalize the top-k router weights to sum to 1.")
    tie_word_embeddings: bool = Field(True, description="Share input embedding and LM head.")
    rope_theta: float = Field(10000.0, gt=0, description="RoPE base.")
    initializer_range: float = Field(
        0.02,
        gt=0,
        le=1.0,
        description="Std of the random init (larger gives peakier, more trained-like logits).",
    )

    @model_validator(mode="after")
    def _check_shapes(self) -> TinyModelSpec:
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} must be a multiple of num_heads {self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads {self.num_heads} must be a multiple of num_kv_heads {self.num_kv_heads}"
            )
        if (self.hidden_size // self.num_heads) % 2:
            raise ValueError("head_dim (hidden_size // num_heads) must be even for RoPE")
        if self.arch == "moe" and self.num_experts_per_tok > self.num_experts:
            raise ValueError("num_experts_per_tok cannot exceed num_experts")
        return self

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads


# Sizes are quoted for vocab 4096 with tied embeddings (see tests/unit/models/test_tiny.py).
PRESETS: dict[str, TinyModelSpec] = {
    "dense-1m": TinyModelSpec(
        arch="dense", hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2, intermediate_size=384
    ),
    "dense-5m": TinyModelSpec(
        arch="dense", hidden_size=256, num_layers=5, num_heads=4, num_kv_heads=2, intermediate_size=768
    ),
    "dense-30m": TinyModelSpec(
        arch="dense", hidden_size=512, num_layers=9, num_heads=8, num_kv_heads=4, intermediate_size=1536
    ),
    "dense-100m": TinyModelSpec(
        arch="dense", hidden_size=768, num_layers=13, num_heads=12, num_kv_heads=4, intermediate_size=2560
    ),
    "moe-2m": TinyModelSpec(
        arch="moe",
        hidden_size=128,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=192,
    ),
    "moe-37m": TinyModelSpec(
        arch="moe",
        hidden_size=512,
        num_layers=5,
        num_heads=8,
        num_kv_heads=4,
        num_experts=16,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
    ),
}


def resolve_spec(spec_or_preset: TinyModelSpec | str) -> TinyModelSpec:
    """A spec as given, or the named preset (ConfigError naming the presets otherwise)."""
    if isinstance(spec_or_preset, TinyModelSpec):
        return spec_or_preset
    try:
        return PRESETS[spec_or_preset]
    except KeyError:
        raise ConfigError(
            f"unknown tiny-model preset {spec_or_preset!r}; choose one of {', '.join(PRESETS)}"
        ) from None


def hf_config(spec: TinyModelSpec):
    """The transformers config object for `spec` (Qwen3Config or Qwen3MoeConfig)."""
    common = dict(
        vocab_size=spec.vocab_size,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=spec.tie_word_embeddings,
        rope_parameters={"rope_type": "default", "rope_theta": spec.rope_theta},
        use_sliding_window=False,
        initializer_range=spec.initializer_range,
        dtype="float32",
    )
    if spec.arch == "dense":
        from transformers import Qwen3Config

        return Qwen3Config(**common)
    from transformers import Qwen3MoeConfig

    return Qwen3MoeConfig(
        **common,
        num_experts=spec.num_experts,
        num_experts_per_tok=spec.num_experts_per_tok,
        moe_intermediate_size=spec.moe_intermediate_size,
        norm_topk_prob=spec.norm_topk_prob,
        decoder_sparse_step=1,
        mlp_only_layers=[],
    )


def build_tiny_model(
    spec_or_preset: TinyModelSpec | str, *, vocab_size: int | None = None, seed: int = 0
) -> PreTrainedModel:
    """A randomly initialized fp32 CPU model, identical for identical (spec, vocab_size, seed).

    `vocab_size` overrides the spec's (pass `len(tokenizer)` so every token has an embedding).
    The caller's global torch RNG state is left as it was.
    """
    import torch
    from transformers import Qwen3ForCausalLM, Qwen3MoeForCausalLM

    spec = resolve_spec(spec_or_preset)
    if vocab_size is not None:
        spec = spec.model_copy(update={"vocab_size": vocab_size})
        TinyModelSpec.model_validate(spec.model_dump())  # bounds still hold
    config = hf_config(spec)
    cls = Qwen3ForCausalLM if spec.arch == "dense" else Qwen3MoeForCausalLM
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = cls(config)
    model.to(dtype=torch.float32)
    model.eval()
    return model


@dataclass(frozen=True)
class ParameterCount:
    """Parameters of a model: all of them, and those one token uses (differs only for MoE)."""

    total: int
    active: int
    embedding: int

    def __str__(self) -> str:
        return f"{_human(self.total)} total, {_human(self.active)} active per token"


def count_parameters(model: PreTrainedModel) -> ParameterCount:
    """Total parameters (tied weights counted once) and the per-token active count for MoE."""
    seen: set[int] = set()
    total = 0
    inactive = 0
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            total += p.numel()
            # Expert weights are stacked [num_experts, ...]; a token touches top_k of them.
            n_exp = getattr(module, "num_experts", None)
            if n_exp and p.dim() == 3 and p.shape[0] == n_exp:
                k = getattr(model.config, "num_experts_per_tok", n_exp)
                inactive += p.numel() // n_exp * (n_exp - k)
    embedding = model.get_input_embeddings().weight.numel()
    return ParameterCount(total=total, active=total - inactive, embedding=embedding)


def count_spec_parameters(spec_or_preset: TinyModelSpec | str) -> ParameterCount:
    """`count_parameters` of the model a spec would build, without allocating or initializing it."""
    import torch
    from transformers import Qwen3ForCausalLM, Qwen3MoeForCausalLM

    spec = resolve_spec(spec_or_preset)
    cls = Qwen3ForCausalLM if spec.arch == "dense" else Qwen3MoeForCausalLM
    with torch.device("meta"):  # shapes only
        return count_parameters(cls(hf_config(spec)))


def _human(n: int) -> str:
    return f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n / 1e3:.1f}K"


def save_model_folder(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, path: str | Path) -> Path:
    """Write an ordinary Hugging Face folder: config.json, generation_config.json,
    model.safetensors, tokenizer.json + tokenizer_config.json and the chat template.

    The tokenizer's special-token ids are written into the model and generation configs so that
    `generate()`, our engine and vLLM all stop at the end-of-turn token.
    """
    from inhabit.errors import ModelLoadError

    if len(tokenizer) > model.config.vocab_size:
        raise ModelLoadError(
            f"tokenizer has {len(tokenizer)} tokens but the model only {model.config.vocab_size} "
            "embeddings; build the model with vocab_size=len(tokenizer)"
        )
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    eos_ids = [
        i for i in (tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")) if i is not None
    ]
    eos_ids = [i for i in dict.fromkeys(eos_ids) if i != tokenizer.unk_token_id]
    for cfg in (model.config, model.generation_config):
        cfg.bos_token_id = tokenizer.bos_token_id
        cfg.pad_token_id = tokenizer.pad_token_id
        cfg.eos_token_id = eos_ids[0] if len(eos_ids) == 1 else eos_ids
    model.save_pretrained(path, safe_serialization=True)
    from inhabit.models.tokenizer import save_tokenizer

    save_tokenizer(tokenizer, path)
    return path
