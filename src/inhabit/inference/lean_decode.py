"""The embedded engine's decode step for Qwen3, Qwen3-MoE and Llama without transformers' per-call machinery.

A decode step of a small model on CPU is mostly Python: the stock forward goes through ~60
`nn.Module` calls per layer-stack, keyword plumbing, deprecation and output-capture decorators,
mask preparation and a `Cache` object per step. For dense-5m at one request that overhead was
about half of the step (docs/results.md, "embedded engine vs vLLM-CPU"). `LeanDecode` runs the
same decode step as a flat loop over the layers' weight tensors.

Numerics: the same torch ops, on the same shapes, in the same order as transformers' Qwen3 and
Llama decode paths with the SDPA attention backend (RMSNorm as `Qwen3RMSNorm` / `LlamaRMSNorm`
compute it, `F.linear` per projection, RoPE as `apply_rotary_pos_emb`, GQA packed the way
`sdpa_attention_forward` packs a one-token query, then `F.scaled_dot_product_attention` with the
engine's additive mask), so its logits are bit for bit those of `model(...)` over the engine's
`DecodeCache`; unit tests hold it to `torch.equal`. The MoE feed-forward is the model's own block,
called as a module, so the routing capture (models/routing.py) records routes exactly as before.

Llama (SmolLM2, Llama 3) is Qwen3 without the per-head q/k RMSNorm, with optional biases on the
attention (`attention_bias`) and MLP (`mlp_bias`) projections, and often tied embeddings (the
output head is then the embedding matrix, read through `get_output_embeddings` either way). RoPE
comes from the model's own `rotary_emb`, so `llama3` frequency scaling, which only changes its
inverse frequencies, costs nothing; rope types that change with the sequence length (`dynamic`,
`longrope`) are left to the stock forward.

Fused projections: q/k/v of a layer run as one `F.linear` over the three weights stacked, and a
dense MLP's gate/up likewise (36 -> 21 GEMM calls per step on dense-5m; at one request a call is
a memory-bound GEMV, so fewer, larger ones are faster). Each output element is still one dot
product over the same K in the same order (MKL blocks over N and M, not K, for these shapes); the
bit-equality test covers it, and the benchmark's mismatch line too. The stacked copies cost one
more copy of those weights. They are rebuilt before a step whenever a source parameter changed:
a weight swap writes the model's parameters in place (weights_io.copy_into), which bumps their
version counters, and the forward compares those counters with the ones it stacked from, once
per step (`.data` reassignment, which keeps the counter, is not a supported way to change them).

Packed bf16 weights: on a CPU whose oneDNN has bf16 kernels, every projection of a bf16 model
(the stacked ones, o_proj, down_proj and the output head) runs through oneDNN's linear on a copy of
its weight reordered once into oneDNN's blocked layout (`mkldnn._reorder_linear_weight`) instead of
`F.linear` on the plain weight. A decode step at few rows is a chain of GEMVs bound by reading the
weights; on the reordered layout SmolLM2-135M's step ran 1.18-1.37x faster (bench/decode_step.py,
docs/results.md). The outputs are bit for bit those of `F.linear` (fp32 accumulation in the same
order), so the logits stay those of the stock forward: the unit tests hold the bf16 path to
`torch.equal` too, and the benchmark checks it at every step. The reordered copies of o_proj,
down_proj and the head cost one more copy of those weights; the stacked q/k/v and gate/up are
kept only in the reordered layout.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe", "llama"})
# Feed-forward blocks the loop reproduces: the dense MLPs are run inline, the MoE block as a module.
_MLP_TYPES = frozenset({"Qwen3MLP", "Qwen3MoeSparseMoeBlock", "Qwen3MoeMLP", "LlamaMLP"})
# Rope types whose cos/sin depend on the position only (the frequencies are fixed at load).
_ROPE_TYPES = {"qwen3": {"default"}, "qwen3_moe": {"default"}, "llama": {"default", "llama3"}}


def supports(model: Any) -> bool:
    """True when `LeanDecode` reproduces this model's decode step (else the engine uses the stock one)."""
    cfg = getattr(model, "config", None)
    model_type = getattr(cfg, "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        return False
    if getattr(cfg, "_attn_implementation", None) != "sdpa":
        return False
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or []):
        return False
    if getattr(cfg, "pretraining_tp", 1) != 1:  # Llama's sliced-projection mode: other reductions
        return False
    rope = getattr(cfg, "rope_parameters", None) or {}
    if rope.get("rope_type", "default") not in _ROPE_TYPES[model_type]:
        return False
    base = getattr(model, model.base_model_prefix, None)
    return base is not None and all(_layer_supported(layer) for layer in base.layers)


def _layer_supported(layer: Any) -> bool:
    if type(layer.mlp).__name__ not in _MLP_TYPES:
        return False
    attn = layer.self_attn
    qn, kn = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
    if (qn is None) != (kn is None):
        return False
    return qn is None or qn.variance_epsilon == kn.variance_epsilon


class _Layer:
    """One decoder layer's modules, and its fused projection weights (see module docstring)."""

    def __init__(self, layer: Any, packed: bool) -> None:
        attn, mlp = layer.self_attn, layer.mlp
        self.packed = packed
        self.ln1, self.ln2 = layer.input_layernorm, layer.post_attention_layernorm
        self.o, self.mlp = attn.o_proj, mlp
        # Qwen3 normalizes each query and key head; Llama has no such norms (qn is None).
        self.qn, self.kn = getattr(attn, "q_norm", None), getattr(attn, "k_norm", None)
        self.dense = hasattr(mlp, "gate_proj") and not hasattr(mlp, "experts")
        self.eps, self.eps2 = self.ln1.variance_epsilon, self.ln2.variance_epsilon
        self.qk_eps = None if self.qn is None else self.qn.variance_epsilon
        self.proj = [attn.q_proj, attn.k_proj, attn.v_proj] + (
            [mlp.gate_proj, mlp.up_proj] if self.dense else []
        )
        self.fuse()

    def sources(self) -> list[torch.Tensor]:
        norms = [] if self.qn is None else [self.qn.weight, self.kn.weight]
        out = self.proj + ([self.o, self.mlp.down_proj] if self.packed and self.dense else [])
        return [t for m in out for t in (m.weight, m.bias) if t is not None] + norms

    def version(self) -> list[int]:
        return [t._version for t in self.srcs]

    def fuse(self) -> None:
        q, k, v = self.proj[:3]
        self.qkv = torch.cat([q.weight.detach(), k.weight.detach(), v.weight.detach()])
        self.qkv_b = (
            None if q.bias is None else torch.cat([q.bias.detach(), k.bias.detach(), v.bias.detach()])
        )
        self.gu = self.gu_b = None
        if self.dense:
            gate, up = self.proj[3], self.proj[4]
            self.gu = torch.cat([gate.weight.detach(), up.weight.detach()])
            if gate.bias is not None:
                self.gu_b = torch.cat([gate.bias.detach(), up.bias.detach()])
        self.qk_w = None
        if self.qn is not None:
            hq, hk = q.out_features // self.qn.weight.shape[0], k.out_features // self.kn.weight.shape[0]
            self.qk_w = torch.cat(
                [self.qn.weight.detach().expand(hq, -1), self.kn.weight.detach().expand(hk, -1)]
            )
        # The weights each projection runs on: plain (F.linear) or reordered once for oneDNN.
        self.o_w, self.down_w = self.o.weight, self.mlp.down_proj.weight if self.dense else None
        if self.packed:
            self.qkv = _pack(self.qkv)
            self.o_w = _pack(self.o_w)
            if self.dense:
                self.gu, self.down_w = _pack(self.gu), _pack(self.down_w)
        self.srcs = self.sources()
        self.stamp = self.version()


class LeanDecode:
    """One decode step over rows 0..n-1 of the engine's slot KV cache (see module docstring)."""

    def __init__(self, model: Any) -> None:
        cfg = model.config
        self.model = model
        base = getattr(model, model.base_model_prefix)
        self.embed = base.embed_tokens
        self.norm = base.norm
        self.rotary = base.rotary_emb
        self.lm_head = model.get_output_embeddings()
        self.packed = packable(model)
        self.layers = [_Layer(layer, self.packed) for layer in base.layers]
        self.linear = _packed_linear if self.packed else F.linear
        self._pack_head()
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.groups = self.num_heads // self.num_kv_heads
        self.scaling = self.head_dim**-0.5
        self.act = F.silu if cfg.hidden_act == "silu" else None

    def _pack_head(self) -> None:
        self.head_srcs = [t for t in (self.lm_head.weight, self.lm_head.bias) if t is not None]
        self.head_stamp = [t._version for t in self.head_srcs]
        self.head_w = _pack(self.lm_head.weight) if self.packed else self.lm_head.weight

    def forward(
        self,
        ids: torch.Tensor,
        rows: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        kv_len: int,
        keys: list[torch.Tensor],
        values: list[torch.Tensor],
    ) -> torch.Tensor:
        """Logits [n, V] of one new token per row: `ids` [n, 1] at `positions` [n] (long), KV written
        into `keys[l][rows, :, positions]` and attended over the first `kv_len` positions under the
        additive `mask` [n, 1, 1, kv_len]."""
        n, d = ids.shape[0], self.head_dim
        h = self.embed(ids)  # [n, 1, H]
        cos, sin = self.rotary(h, positions[:, None])
        cos = cos.unsqueeze(2)  # [n, 1, 1, D]: broadcast over the heads of [n, 1, heads, D]
        # rotate_half(x) * sin == roll(x, D/2) * (sin with its first half negated), bit for bit:
        # a product by -s is the negated product by s.
        half = d // 2
        sin = torch.cat((-sin[..., :half], sin[..., half:]), dim=-1).unsqueeze(2)
        hq, hk = self.num_heads, self.num_kv_heads
        linear = self.linear
        for i, ly in enumerate(self.layers):
            if [t._version for t in ly.srcs] != ly.stamp:  # weights changed since the last fuse
                ly.fuse()
            x = _rms(h, ly.ln1.weight, ly.eps)
            qkv = linear(x, ly.qkv, ly.qkv_b)  # [n, 1, (hq + 2 hk) D]
            qk = qkv[..., : (hq + hk) * d].view(n, 1, hq + hk, d)
            if ly.qk_w is not None:
                # q_norm and k_norm in one call: RMSNorm is per head vector, its weight is per head.
                qk = _rms(qk, ly.qk_w, ly.qk_eps)
            qk = qk * cos + qk.roll(half, -1) * sin
            kb, vb = keys[i], values[i]
            kb[rows, :, positions] = qk[:, 0, hq:].to(kb.dtype)
            vb[rows, :, positions] = qkv[:, 0, (hq + hk) * d :].view(n, hk, d).to(vb.dtype)
            # The query as sdpa_attention_forward packs a one-token query for GQA: [n, kv heads, group, D].
            q = qk[:, 0, :hq].reshape(n, hk, hq // hk, d) if hq > hk else qk[:, :, :hq].transpose(1, 2)
            a = F.scaled_dot_product_attention(
                q, kb[:n, :, :kv_len], vb[:n, :, :kv_len], attn_mask=mask, dropout_p=0.0, scale=self.scaling
            )
            h = h + linear(a.reshape(n, 1, -1), ly.o_w, ly.o.bias)
            x = _rms(h, ly.ln2.weight, ly.eps2)
            if ly.dense and self.act is not None:
                gu = linear(x, ly.gu, ly.gu_b)
                inter = gu.shape[-1] // 2
                h = h + linear(self.act(gu[..., :inter]) * gu[..., inter:], ly.down_w, ly.mlp.down_proj.bias)
            else:
                h = h + ly.mlp(x)
        h = _rms(h, self.norm.weight, self.norm.variance_epsilon)
        if [t._version for t in self.head_srcs] != self.head_stamp:
            self._pack_head()
        return linear(h, self.head_w, self.lm_head.bias)[:, -1]


def packable(model: Any) -> bool:
    """True when the projections run on oneDNN-reordered bf16 weights (module docstring)."""
    weight = model.get_output_embeddings().weight
    return (
        weight.dtype == torch.bfloat16
        and weight.device.type == "cpu"
        and torch.backends.mkldnn.is_available()
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    )


def _pack(weight: torch.Tensor) -> torch.Tensor:
    # Reordered for a batch of one (the GEMV case it is for); larger batches run on it as well.
    return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)


def _packed_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # Qwen3RMSNorm.forward (and LlamaRMSNorm's, the same ops), op for op (the casts are skipped where they are no-ops).
    dtype = x.dtype
    if dtype != torch.float32:
        x = x.to(torch.float32)
    var = x.pow(2).mean(-1, keepdim=True)
    x = x * torch.rsqrt(var + eps)
    return weight * (x if dtype == torch.float32 else x.to(dtype))
