"""A batch-invariant forward for Qwen3 and Qwen3-MoE: each token's result depends on its own
sequence only, never on which other tokens share the call.

The embedded engine's deterministic mode (`engine.deterministic`) runs prefill and decode through
`InvariantForward`, and the trainer's deterministic mode (`trainer.deterministic`) recomputes
logprobs with the same object, so engine and trainer logprobs agree bit for bit. The forward
works on ROWS: one row is one token (its id, its sequence's KV slot, its position). A prefill
chunk, a decode step over 64 requests and a trainer's whole-sequence forward are all just lists of
rows, and every row goes through exactly the same per-row arithmetic:

* Linear layers (projections, experts, router, LM head): `rowwise_linear`, one (1 x K) @ (K x N)
  product per row through `torch.bmm` with the weight broadcast (stride 0) over rows. A plain
  `F.linear` on CPU (MKL sgemm) picks its kernel by the number of rows M: M=1 is a GEMV, M=2..3
  and M>=4 are different GEMM paths, and each sums over K in its own order, so the same row's
  output changes in its last bits with the batch size. A batch of 1-row products always takes
  the 1-row path, whatever the number of rows.
* Attention: per query row and head, over its own sequence's keys in fixed blocks of
  `block_size` absolute positions (0..B-1, B..2B-1, ...), in increasing order, with an online
  softmax (running max, rescaled sum). Block j is visited only by queries at position >= j*B, so
  a query sees the same blocks, with the same masked tail, whether it is a decode step among
  longer neighbours, part of a prefill chunk, or part of a trainer forward. The stock path (SDPA
  over a padded [batch, kv_len] buffer) reduces over kv_len, which is the LONGEST row of the
  batch, so neighbours change the blocking.
* RMSNorm, SiLU, RoPE, softmax and log-softmax are row-wise kernels whose reduction runs along
  one row of a fixed length; they are already invariant and are used as they are.
* MoE: the router is a `rowwise_linear`; each expert runs `rowwise_linear` on its tokens (the
  stock path runs one GEMM per expert over however many tokens chose it: M changes with the
  batch); each token's expert outputs are combined in top-k order (slot 0 + slot 1 + ...), a
  per-token order that no other token affects.

Weights are read from the transformers model in `dtype` (fp32 or bf16; a bf16 forward of fp32
weights casts them once per `refresh()`, with the same rounding as `model.to(bfloat16)`).
Attention arithmetic runs in fp32 for every dtype, like the stock eager path's softmax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from inhabit.errors import ConfigError

SUPPORTED_MODEL_TYPES = frozenset({"qwen3", "qwen3_moe"})
BLOCK_SIZE = 64


def rowwise_linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """x [n, K] @ weight[N, K]^T, one 1-row product per row (see module docstring)."""
    n, k = x.shape
    if n == 0:
        return x.new_zeros((0, weight.shape[0]))
    wt = weight.t().unsqueeze(0).expand(n, k, weight.shape[0])
    return torch.bmm(x.unsqueeze(1), wt).squeeze(1)


def check_supported(model: Any) -> None:
    """ConfigError unless `InvariantForward` implements this architecture."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise ConfigError(
            f"deterministic mode implements {', '.join(sorted(SUPPORTED_MODEL_TYPES))} models, not "
            f"{model_type!r}; turn deterministic off for this model"
        )


@dataclass
class KVStore:
    """Per-layer key/value buffers [slots, kv_heads, capacity, head_dim] (keys after RoPE), the
    layout of the engine's `SlotKVCache`; the trainer builds a fresh one per forward."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @classmethod
    def empty(cls, layers: int, slots: int, kv_heads: int, length: int, head_dim: int, dtype) -> KVStore:
        shape = (slots, kv_heads, length, head_dim)
        return cls(
            [torch.zeros(shape, dtype=dtype) for _ in range(layers)],
            [torch.zeros(shape, dtype=dtype) for _ in range(layers)],
        )


class InvariantForward:
    """Batch-invariant forward over rows of a Qwen3 / Qwen3-MoE transformers model."""

    def __init__(self, model: Any, dtype: torch.dtype | None = None, block_size: int = BLOCK_SIZE) -> None:
        check_supported(model)
        self.model = model
        self.dtype = dtype or next(model.parameters()).dtype
        self.block_size = block_size
        cfg = model.config
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.scaling = self.head_dim**-0.5
        self.base = getattr(model, model.base_model_prefix)
        self.is_moe = cfg.model_type == "qwen3_moe"
        # A fresh fp32 RoPE module: `model.to(bfloat16)` rounds the model's own inv_freq buffer, which
        # would make a bf16 engine's positions differ from a trainer's fp32 model cast on the fly.
        self.rotary = type(self.base.rotary_emb)(cfg)
        self._weights: dict[int, torch.Tensor] = {}
        self.refresh()

    def refresh(self) -> None:
        """Re-read the weights (call after they change, when `dtype` differs from the model's)."""
        self._weights = {}

    def _w(self, p: torch.Tensor) -> torch.Tensor:
        if p.dtype == self.dtype:
            return p.detach()
        key = id(p)
        if key not in self._weights:
            self._weights[key] = p.detach().to(self.dtype)
        return self._weights[key]

    # ------------------------------------------------------------------ the forward

    @torch.no_grad()
    def forward(
        self,
        input_ids: torch.Tensor,
        slots: torch.Tensor,
        positions: torch.Tensor,
        store: KVStore,
        logits_rows: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run rows (token `input_ids[i]` of the sequence in KV slot `slots[i]` at `positions[i]`).

        Writes every row's keys/values into `store` first (layer by layer), so rows of the same
        sequence in one call see each other causally. Returns (logits [len(logits_rows), V] of the
        rows asked for, in `self.dtype`; MoE routes [layers, n, k] or None).
        """
        base = self.base
        h = base.embed_tokens(input_ids).to(self.dtype)
        cos, sin = self.rotary(h[None], positions[None])
        cos, sin = cos[0][:, None, :], sin[0][:, None, :]  # [n, 1, D]
        routes = []
        for i, layer in enumerate(base.layers):
            x = self._norm(layer.input_layernorm, h)
            h = h + self._attention(layer.self_attn, x, cos, sin, slots, positions, store, i)
            x = self._norm(layer.post_attention_layernorm, h)
            mlp = layer.mlp
            if hasattr(mlp, "gate") and hasattr(mlp, "experts"):
                out, r = self._moe(mlp, x)
                routes.append(r)
            else:
                act = mlp.act_fn(rowwise_linear(x, self._w(mlp.gate_proj.weight)))
                out = rowwise_linear(
                    act * rowwise_linear(x, self._w(mlp.up_proj.weight)), self._w(mlp.down_proj.weight)
                )
            h = h + out
        if logits_rows is not None:
            h = h[logits_rows]
        h = self._norm(base.norm, h)
        logits = rowwise_linear(h, self._w(self.model.get_output_embeddings().weight))
        return logits, (torch.stack(routes) if routes else None)

    def _norm(self, norm: nn.Module, x: torch.Tensor) -> torch.Tensor:
        # Qwen3RMSNorm's arithmetic with the weight in our dtype (row-wise: invariant as it is).
        dtype = x.dtype
        xf = x.float()
        var = xf.pow(2).mean(-1, keepdim=True)
        xf = xf * torch.rsqrt(var + norm.variance_epsilon)
        return self._w(norm.weight) * xf.to(dtype)

    def _attention(self, attn, x, cos, sin, slots, positions, store: KVStore, layer: int) -> torch.Tensor:
        n, dim = x.shape[0], self.head_dim
        q = rowwise_linear(x, self._w(attn.q_proj.weight)).view(n, self.num_heads, dim)
        k = rowwise_linear(x, self._w(attn.k_proj.weight)).view(n, self.num_kv_heads, dim)
        v = rowwise_linear(x, self._w(attn.v_proj.weight)).view(n, self.num_kv_heads, dim)
        q, k = self._norm(attn.q_norm, q), self._norm(attn.k_norm, k)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        kbuf, vbuf = store.keys[layer], store.values[layer]
        kbuf[slots, :, positions] = k.to(kbuf.dtype)
        vbuf[slots, :, positions] = v.to(vbuf.dtype)
        out = self._block_attention(q.float(), kbuf, vbuf, slots, positions)
        return rowwise_linear(out.to(self.dtype).reshape(n, -1), self._w(attn.o_proj.weight))

    def _block_attention(self, q, kbuf, vbuf, slots, positions) -> torch.Tensor:
        """Online-softmax attention of each query row over its own keys, block by block."""
        n, heads, dim = q.shape
        group = heads // self.num_kv_heads
        bsz = self.block_size
        m = torch.full((n, heads), float("-inf"))
        denom = torch.zeros((n, heads))
        acc = torch.zeros((n, heads, dim))
        offsets = torch.arange(bsz)
        for j in range(int(positions.max()) // bsz + 1):
            rows = (positions >= j * bsz).nonzero().squeeze(1)  # queries that reach this block
            everyone = rows.shape[0] == n  # the usual case: plain tensors, no gather/scatter copies
            start = j * bsz
            sl = slots if everyone else slots[rows]
            kb = kbuf[sl, :, start : start + bsz].float()
            vb = vbuf[sl, :, start : start + bsz].float()
            if kb.shape[2] < bsz:  # the buffer ends inside the block: pad to the fixed block shape
                pad = (0, 0, 0, bsz - kb.shape[2])
                kb, vb = nn.functional.pad(kb, pad), nn.functional.pad(vb, pad)
            r, kvh = rows.shape[0], self.num_kv_heads
            # One (group x D) @ (D x B) product per (row, kv head): the `group` query heads sharing a
            # kv head form a matrix of a fixed shape, so no call ever changes a product's shape.
            kb = kb.reshape(r * kvh, bsz, dim)
            vb = vb.reshape(r * kvh, bsz, dim)
            qr = (q if everyone else q[rows]).reshape(r * kvh, group, dim)
            s = torch.bmm(qr, kb.transpose(1, 2)).view(r, heads, bsz) * self.scaling
            pos = positions if everyone else positions[rows]
            hidden = (start + offsets)[None, :] > pos[:, None]  # [r, B]: keys after the query
            s = s.masked_fill(hidden[:, None, :], float("-inf"))
            m_old = m if everyone else m[rows]
            m_new = torch.maximum(m_old, s.amax(-1))
            alpha = torch.exp(m_old - m_new)
            p = torch.exp(s - m_new[..., None])
            pv = torch.bmm(p.reshape(r * kvh, group, bsz), vb).view(r, heads, dim)
            if everyone:
                denom = denom * alpha + p.sum(-1)
                acc = acc * alpha[..., None] + pv
                m = m_new
            else:
                denom[rows] = denom[rows] * alpha + p.sum(-1)
                acc[rows] = acc[rows] * alpha[..., None] + pv
                m[rows] = m_new
        return acc / denom[..., None]

    def _moe(self, block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        gate, experts = block.gate, block.experts
        logits = rowwise_linear(x, self._w(gate.weight))
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top_value, top_index = torch.topk(probs, gate.top_k, dim=-1)
        if gate.norm_topk_prob:
            top_value = top_value / top_value.sum(dim=-1, keepdim=True)
        top_value = top_value.to(x.dtype)
        n, k = top_index.shape
        per_slot = x.new_zeros((n, k, x.shape[1]))
        gate_up, down = self._w(experts.gate_up_proj), self._w(experts.down_proj)
        for e in top_index.unique().tolist():
            tok, slot = (top_index == e).nonzero(as_tuple=True)
            g, u = rowwise_linear(x[tok], gate_up[e]).chunk(2, dim=-1)
            y = rowwise_linear(experts.act_fn(g) * u, down[e])
            per_slot[tok, slot] = y * top_value[tok, slot, None]
        out = per_slot[:, 0]
        for slot in range(1, k):  # a fixed per-token order: top-1's output first
            out = out + per_slot[:, slot]
        return out, top_index

    # ------------------------------------------------------------------ whole sequences

    def sequence_logits(
        self, sequences: list[list[int]]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        """Logits [len, V] (fp32) and routes [len, layers, k] of every position of each sequence,
        computed as rows (what a trainer recomputes; bitwise what the engine computed)."""
        longest = max(len(s) for s in sequences)
        cap = -(-longest // self.block_size) * self.block_size
        store = KVStore.empty(
            len(self.base.layers), len(sequences), self.num_kv_heads, cap, self.head_dim, self.dtype
        )
        ids = torch.tensor([t for s in sequences for t in s], dtype=torch.long)
        slots = torch.tensor([i for i, s in enumerate(sequences) for _ in s], dtype=torch.long)
        pos = torch.tensor([p for s in sequences for p in range(len(s))], dtype=torch.long)
        logits, routes = self.forward(ids, slots, pos, store)
        sizes = [len(s) for s in sequences]
        out_logits = list(logits.float().split(sizes))
        out_routes: list[torch.Tensor | None] = (
            list(routes.permute(1, 0, 2).split(sizes)) if routes is not None else [None] * len(sizes)
        )
        return out_logits, out_routes


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
