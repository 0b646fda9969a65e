"""A slot-based KV cache for continuous batching with a stock transformers model.

Each running request owns one slot (row) of per-layer key/value buffers shaped
[max_slots, kv_heads, capacity, head_dim]. The running batch always occupies slots 0..n-1: a
request that finishes hands its slot to the last running one (one slot copy), so a decode step
reads the buffers as a plain slice, without gathering. Rows have different lengths; a decode step
writes each row's new key/value at that row's own position and passes the model an explicit 4D
additive mask that hides each row's unused tail, plus explicit position ids. Keys are stored after
RoPE (as transformers caches them), so a row's position in the buffer is its real position.

`DecodeCache` is the `transformers.Cache` the model sees during a decode step; prompts are
prefilled with an ordinary `DynamicCache` (left-padded batch) and copied into their slots.
Buffers grow by doubling up to `max_len` (no paging: on CPU the copy is cheap next to compute).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import Cache, CacheLayerMixin


class SlotKVCache:
    """Key/value buffers for up to `max_slots` sequences of at most `max_len` tokens."""

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        max_slots: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        initial_capacity: int = 256,
    ) -> None:
        self.num_layers = num_layers
        self.max_slots = max_slots
        self.max_len = max_len
        self.capacity = min(initial_capacity, max_len)
        shape = (max_slots, num_kv_heads, self.capacity, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.lengths = [0] * max_slots

    def reserve(self, length: int) -> None:
        """Make room for sequences of `length` tokens (doubling, capped at max_len)."""
        if length <= self.capacity:
            return
        assert length <= self.max_len, "caller checks the context limit"
        new_cap = self.capacity
        while new_cap < length:
            new_cap *= 2
        new_cap = min(new_cap, self.max_len)
        for store in (self.keys, self.values):
            for i, buf in enumerate(store):
                grown = buf.new_zeros((*buf.shape[:2], new_cap, buf.shape[3]))
                grown[:, :, : self.capacity] = buf
                store[i] = grown
        self.capacity = new_cap

    def write_prefix(self, slot: int, layer_kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Fill `slot` with a prefilled sequence: per layer (keys, values) of shape [H, T, D]."""
        length = layer_kv[0][0].shape[1]
        self.reserve(length)
        for layer, (k, v) in enumerate(layer_kv):
            self.keys[layer][slot, :, :length] = k
            self.values[layer][slot, :, :length] = v
        self.lengths[slot] = length

    def move(self, src: int, dst: int) -> None:
        """Copy slot `src` into slot `dst` (used to keep running rows contiguous)."""
        if src == dst:
            return
        n = self.lengths[src]
        for store in (self.keys, self.values):
            for buf in store:
                buf[dst, :, :n] = buf[src, :, :n]
        self.lengths[dst] = n
        self.lengths[src] = 0

    def decode_rows(self, n_rows: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(rows, positions, kv_len) of one decode step over rows 0..n_rows-1, on the buffers' device;
        makes room for the new token (what `decode_cache` does, without a `Cache` object)."""
        kv_len = max(self.lengths[:n_rows]) + 1
        self.reserve(kv_len)
        dev = self.keys[0].device
        return torch.arange(n_rows, device=dev), torch.tensor(self.lengths[:n_rows], device=dev), kv_len

    @staticmethod
    def decode_mask(positions: torch.Tensor, kv_len: int, dtype: torch.dtype, device) -> torch.Tensor:
        """Additive mask [n, 1, 1, kv_len]: row i sees positions 0..positions[i] (its new token last)."""
        visible = torch.arange(kv_len, device=positions.device)[None, :] <= positions[:, None]
        return _additive(visible, dtype, device)[:, None, None, :]

    def decode_cache(self, n_rows: int) -> DecodeCache:
        """The Cache for one decode step of rows 0..n_rows-1 (each adds one token)."""
        longest = max(self.lengths[:n_rows]) + 1
        self.reserve(longest)
        return DecodeCache(self, n_rows)

    def commit_decode(self, n_rows: int) -> None:
        """Account the token each of rows 0..n_rows-1 just added."""
        for i in range(n_rows):
            self.lengths[i] += 1


class _SlotLayer(CacheLayerMixin):
    """One layer of a decode step: scatter new keys/values, return each row's live prefix."""

    def __init__(self, store: SlotKVCache, layer: int, rows: torch.Tensor, pos: torch.Tensor, kv_len: int):
        super().__init__()
        self.store, self.layer, self.rows, self.pos, self.kv_len = store, layer, rows, pos, kv_len
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        n = self.rows.shape[0]
        k_buf, v_buf = self.store.keys[self.layer], self.store.values[self.layer]
        # key_states: [n, H, 1, D]; buf[rows, :, pos] addresses [n, H, D].
        k_buf[self.rows, :, self.pos] = key_states[:, :, 0].to(k_buf.dtype)
        v_buf[self.rows, :, self.pos] = value_states[:, :, 0].to(v_buf.dtype)
        return k_buf[:n, :, : self.kv_len], v_buf[:n, :, : self.kv_len]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.kv_len, 0

    def get_seq_length(self) -> int:
        return self.kv_len - 1

    def get_max_length(self) -> int:
        return -1


class DecodeCache(Cache):
    """The `transformers.Cache` handed to the model for one decode step over rows 0..n-1."""

    def __init__(self, store: SlotKVCache, n_rows: int) -> None:
        self.positions = torch.tensor(store.lengths[:n_rows], dtype=torch.long)
        kv_len = int(self.positions.max()) + 1
        rows = torch.arange(n_rows)
        device = store.keys[0].device
        rows, pos = rows.to(device), self.positions.to(device)
        super().__init__(layers=[_SlotLayer(store, i, rows, pos, kv_len) for i in range(store.num_layers)])
        self.kv_len = kv_len

    def attention_mask(self, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """Additive mask [n, 1, 1, kv_len]: row i sees positions 0..pos_i (its new token last)."""
        return SlotKVCache.decode_mask(self.positions, self.kv_len, dtype, device)


def prefill_mask(pads: list[int], total: int, dtype: torch.dtype, device) -> torch.Tensor:
    """Additive mask [b, 1, T, T] for a left-padded batch: causal, and blind to each row's padding."""
    q = torch.arange(total)
    causal = q[None, :] <= q[:, None]  # [T(query), T(key)]
    pad = torch.tensor(pads)
    not_pad = q[None, :] >= pad[:, None]  # [b, T(key)]
    visible = causal[None, :, :] & not_pad[:, None, :]
    return _additive(visible, dtype, device)[:, None, :, :]


def _additive(visible: torch.Tensor, dtype: torch.dtype, device) -> torch.Tensor:
    # The dtype's min, not -inf: a fully hidden query row (padding) then attends uniformly
    # instead of producing NaN, and padding rows are discarded anyway.
    mask = torch.zeros(visible.shape, dtype=dtype)
    mask.masked_fill_(~visible, torch.finfo(dtype).min)
    return mask.to(device)
