"""Configuration of the embedded engine (`EngineConfig`) and of the server (`ServeConfig`), and
the server flavors an external engine may speak (`ServerFlavor`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inhabit.config import Config

ServerFlavor = Literal["inhabit", "vllm", "sglang"]
"""Which server speaks at a remote engine's URL: `inhabit serve`, vLLM or SGLang (their RL
fields and weight-update routes differ; `inhabit.inference.remote`)."""


class EngineConfig(Config):
    """How the embedded engine batches, caches and reports."""

    max_batch_size: int = Field(64, ge=1, le=4096, description="Requests decoded together in one step.")
    max_queue: int = Field(
        1024,
        ge=1,
        le=1_000_000,
        description="Requests waiting or running at once; more raise EngineOverloaded.",
    )
    max_model_len: int | None = Field(
        None, ge=2, description="Longest prompt+completion; default: the model's max_position_embeddings."
    )
    prefill_token_budget: int = Field(
        4096, ge=16, description="Most prompt tokens (padded) prefilled in one forward; bigger batches split."
    )
    kv_cache_gb: float = Field(
        4.0,
        gt=0,
        description=(
            "Most GiB the KV cache may hold (running requests' keys and values plus reused "
            "prefixes), like vLLM's VLLM_CPU_KVCACHE_SPACE. Requests that do not fit wait; one whose "
            "prompt alone does not fit is refused."
        ),
    )
    prefix_cache: bool = Field(
        True,
        description=(
            "Keep finished requests' KV (within kv_cache_gb, least recently used first out) and "
            "prefill only the part of a new prompt after the longest cached prefix (an episode's "
            "next turn). Off for MoE models that record routes."
        ),
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto",
        description=(
            "Weights and KV cache dtype. auto: bfloat16 where the device computes it natively (a CPU "
            "with AVX512-BF16 or AMX, a CUDA GPU with bf16) for models of 50M parameters or more, "
            "float32 otherwise and in deterministic mode (inference/precision.py)."
        ),
    )
    device: str = Field("cpu", description="torch device of the model and the KV cache.")
    logprobs_mode: Literal["tempered", "raw"] = Field(
        "tempered",
        description=(
            "tempered: log_softmax(logits / temperature), the distribution sampled from before top-p "
            "truncation (what an RL trainer recomputes when it divides by the same temperature); "
            "raw: log_softmax(logits) whatever the temperature. Greedy (temperature 0) reports raw."
        ),
    )
    kv_after_swap: Literal["recompute", "keep"] = Field(
        "recompute",
        description=(
            "After load_weights, recompute the KV cache of requests in flight with the new weights "
            "(tokens after the swap are exactly what the new weights give for that prefix), or keep "
            "the stale cache (cheaper; post-swap tokens attend to keys the old weights computed)."
        ),
    )
    stop_at_eos: bool = Field(True, description="Stop at the model's end-of-sequence token ids.")
    capture_routing: bool = Field(True, description="Record routed expert ids per token for MoE models.")
    seed: int | None = Field(
        None, description="Seed of the generator used by requests without their own seed."
    )
    num_threads: int | None = Field(
        None, ge=1, le=512, description="torch intra-op threads for the decode worker (default: torch's)."
    )
    lean_decode: bool = Field(
        True,
        description=(
            "Run decode steps of Qwen3 / Qwen3-MoE / Llama models through inference/lean_decode.py (the same "
            "ops as transformers' forward, bit for bit, without its per-call Python); other models, "
            "or False, use the model's own forward."
        ),
    )
    deterministic: bool = Field(
        False,
        description=(
            "Batch-invariant kernels (models/invariant.py): a request's tokens and logprobs depend "
            "only on its prompt, sampling parameters, seed and weights, not on its batch neighbours, "
            "arrival order or prefill chunking; a trainer with trainer.deterministic recomputes them "
            "bit for bit. Qwen3 and Qwen3-MoE models only. See docs/engine.md for the cost."
        ),
    )


class ServeConfig(Config):
    """`inhabit serve`: where to listen and who may load weights."""

    model: str = Field(..., description="Hugging Face model folder to serve.")
    host: str = Field("127.0.0.1", description="Bind address (loopback by default).")
    port: int = Field(8000, ge=0, le=65535, description="TCP port (0: any free port).")
    api_key: str | None = Field(
        None, description="Bearer token required on every endpoint when set; always on /v1/load_weights."
    )
    served_model_name: str | None = Field(None, description="Model id in /v1/models (default: folder name).")
    tool_call_parser: Literal["auto", "none", "hermes", "qwen3_coder", "llama3_json", "inhabit"] = Field(
        "auto",
        description=(
            "How generated text becomes OpenAI tool_calls: auto (detected from the chat template), "
            "none (requests with tools answer 400), or a model family's format."
        ),
    )
    max_upload_bytes: int = Field(
        8 * 1024**3, ge=1, description="Largest safetensors upload accepted by /v1/load_weights."
    )
    max_request_bytes: int = Field(
        4 * 1024**2,
        ge=1024,
        description=(
            "Largest request body on every route but /v1/load_weights (413 past it, before parsing); "
            "4 MiB holds any prompt that fits a 500k-token context."
        ),
    )
    follow: str | None = Field(
        None, description="Weight store (folder or URL) whose newest version is swapped in as it appears."
    )
    follow_poll_s: float = Field(1.0, gt=0, description="Seconds between looks at the followed store.")
    sessions: str | None = Field(
        None, description="Session store (SQLite) recording requests sent with an X-Inhabit-Session header."
    )
    reasoning_parser: Literal["none", "qwen3", "deepseek_r1"] = Field(
        "none",
        description="Split a thinking model's <think> block into reasoning_content (reasoning.py).",
    )
    xml_tools: bool = Field(
        False,
        description=(
            "For a chat template that renders no `tools` (the `inhabit` parser): describe a request's "
            "tools in the system message in inhabit's XML call format instead of answering 400."
        ),
    )
    sessions_keep_constrained: bool = Field(
        False,
        description=(
            "Keep the token data of constrained turns (response_format, a forced tool call) in "
            "recorded sessions; by default they are recorded without it, so training leaves them out."
        ),
    )
    engine: EngineConfig = Field(default_factory=EngineConfig)
