"""KV memory of the embedded engine: a slot cache sized to the running batch, and a prefix cache.

`SlotKVCache` holds per-layer key/value buffers shaped [rows, kv_heads, capacity, head_dim],
where `rows` is the number of running requests and `capacity` the longest running row rounded up
to a page of `PAGE_TOKENS` positions: memory follows the tokens in flight (running rows x their
longest length), not the engine's batch limit x the context. Running requests always occupy rows
0..n-1: a request that finishes hands its row to the last running one (one row copy), so a decode
step reads the buffers as a plain slice, without gathering (paging would gather every key of
every row on every step, which on CPU costs about as much as the attention itself). The buffers
are reallocated layer by layer when the batch outgrows them (a copy of one layer at a time,
never of the whole cache), with rows to spare when they fit, and shrunk when they hold more than
twice what the rows need.

Rows have different lengths; a decode step writes each row's new key/value at that row's own
position and passes the model an explicit 4D additive mask that hides each row's unused tail,
plus explicit position ids. Keys are stored after RoPE (as transformers caches them), so a row's
position in the buffer is its real position.

`DecodeCache` is the `transformers.Cache` the model sees during a decode step; prompts are
prefilled with an ordinary `DynamicCache` (left-padded batch) and copied into their rows, or,
when the start of a prompt's keys and values is already known (`PrefixCache`), copied from there
and extended through `ExtendCache` by a forward over the rest of the prompt only.

`PrefixCache` keeps finished requests' keys and values, keyed by their token ids, least recently
used first out: the next turn of an episode (previous prompt + completion + observation) starts
with the previous turn's tokens, and the key/value of a position depends only on the tokens up to
it, so any common prefix of token ids can be reused.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from transformers.cache_utils import Cache, CacheLayerMixin

PAGE_TOKENS = 256
"""Capacity grows and shrinks in steps of this many positions (one copy per page of decoding)."""


class SlotKVCache:
    """Key/value rows of the running requests, each of at most `max_len` tokens (module docstring)."""

    def __init__(
        self,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        max_slots: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        page_tokens: int = PAGE_TOKENS,
    ) -> None:
        self.num_layers, self.num_kv_heads, self.head_dim = num_layers, num_kv_heads, head_dim
        self.max_slots = max_slots
        self.max_len = max_len
        self.page_tokens = page_tokens
        self.dtype, self.device = dtype, device
        self.rows = 0
        self.capacity = 0
        shape = (0, num_kv_heads, 0, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.lengths = [0] * max_slots
        # Bytes one position of one row costs across all layers, keys and values.
        self.token_bytes = (
            num_layers * 2 * num_kv_heads * head_dim * torch.empty((), dtype=dtype).element_size()
        )

    # ------------------------------------------------------------------ sizing

    def rounded(self, length: int) -> int:
        """The capacity that holds `length` positions: whole pages, at most `max_len`."""
        return min(-(-length // self.page_tokens) * self.page_tokens, self.max_len)

    def bytes_for(self, rows: int, length: int) -> int:
        """Bytes of buffers holding `rows` rows of `length` positions (rounded to pages)."""
        return rows * self.rounded(length) * self.token_bytes if rows else 0

    @property
    def nbytes(self) -> int:
        """Bytes the key/value buffers hold now."""
        return self.rows * self.capacity * self.token_bytes

    def needed_length(self, rows: int) -> int:
        """Positions rows 0..rows-1 need for their next token."""
        return max(self.lengths[:rows], default=0) + 1

    def resize(self, rows: int, capacity: int) -> None:
        """Reallocate to exactly `rows` x `capacity`, keeping what fits (one layer at a time, so the
        copy never holds two whole caches)."""
        if (rows, capacity) == (self.rows, self.capacity):
            return
        keep_rows, keep_len = min(rows, self.rows), min(capacity, self.capacity)
        for store in (self.keys, self.values):
            for i, buf in enumerate(store):
                grown = buf.new_zeros((rows, self.num_kv_heads, capacity, self.head_dim))
                grown[:keep_rows, :, :keep_len] = buf[:keep_rows, :, :keep_len]
                store[i] = grown
                del buf
        self.rows, self.capacity = rows, capacity

    def ensure(self, rows: int, length: int, max_bytes: int | None = None) -> None:
        """Make room for `rows` rows of `length` positions. Growth reallocates to that (page-rounded),
        with half as many rows again to spare when that fits in `max_bytes` (requests joining one
        by one would otherwise copy the whole cache each time); buffers more than twice what is
        needed shrink to it."""
        assert length <= self.max_len, "caller checks the context limit"
        capacity = self.rounded(length)
        if rows > self.rows or capacity > self.capacity:
            if rows > self.rows:
                spare = min(max(rows, -(-3 * self.rows // 2)), self.max_slots)
            else:  # only longer: keep the rows there unless more than half of them are idle
                spare = self.rows if self.rows <= 2 * rows else rows
            if max_bytes is not None and self.bytes_for(spare, length) > max_bytes:
                spare = rows
            self.resize(spare, capacity)
        elif self.nbytes > 2 * self.bytes_for(rows, length):
            self.resize(rows, capacity)

    def reserve(self, length: int, rows: int | None = None) -> None:
        """Grow (never shrink) to hold `length` positions in `rows` rows (default: the rows there)."""
        rows = self.rows if rows is None else rows
        if rows > self.rows or length > self.capacity:
            self.resize(max(rows, self.rows), max(self.rounded(length), self.capacity))

    # ------------------------------------------------------------------ rows

    def write_prefix(
        self, slot: int, layer_kv: Sequence[tuple[torch.Tensor, torch.Tensor]], start: int = 0
    ) -> None:
        """Fill `slot` from position `start` with per layer (keys, values) of shape [H, T, D]."""
        length = start + layer_kv[0][0].shape[1]
        self.reserve(length, slot + 1)
        for layer, (k, v) in enumerate(layer_kv):
            self.keys[layer][slot, :, start:length] = k
            self.values[layer][slot, :, start:length] = v
        self.lengths[slot] = length

    def read_row(self, slot: int, length: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Copies of the first `length` keys and values of `slot`, per layer [H, length, D]."""
        return (
            [buf[slot, :, :length].clone() for buf in self.keys],
            [buf[slot, :, :length].clone() for buf in self.values],
        )

    def release(
        self, n_rows: int, drop: Sequence[int], copy: Mapping[int, int]
    ) -> dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """Of rows 0..n_rows-1, remove `drop`, the others keeping their order in rows 0..m-1, and reallocate the
        buffers to exactly those m rows; returns, for each row in `copy`, copies of its first
        `copy[row]` keys and values per layer [H, length, D]. Done one layer at a time (copy that
        layer's rows out, move the survivors into a buffer of their size, free the old one), so the
        copies never sit beside the whole of the old buffers: a batch that finishes together hands
        its KV to the prefix cache without holding it twice."""
        gone = set(drop)
        keep = [r for r in range(n_rows) if r not in gone]
        kept_lengths = [self.lengths[r] for r in keep]
        capacity = self.rounded(max(kept_lengths, default=0) + 1) if keep else 0
        index = torch.tensor(keep, dtype=torch.long, device=self.keys[0].device)
        out: dict[int, tuple[list[torch.Tensor], list[torch.Tensor]]] = {r: ([], []) for r in copy}
        for side, store in enumerate((self.keys, self.values)):
            for i, buf in enumerate(store):
                for r, n in copy.items():
                    out[r][side].append(buf[r, :, :n].clone())
                store[i] = buf.new_zeros((len(keep), self.num_kv_heads, capacity, self.head_dim))
                if keep:
                    torch.index_select(buf[:, :, :capacity], 0, index, out=store[i])
                del buf
        self.lengths = kept_lengths + [0] * (self.max_slots - len(keep))
        self.rows, self.capacity = len(keep), capacity
        return out

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

    # ------------------------------------------------------------------ decode steps

    def decode_rows(self, n_rows: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        """(rows, positions, kv_len) of one decode step over rows 0..n_rows-1, on the buffers' device;
        makes room for the new token (what `decode_cache` does, without a `Cache` object)."""
        kv_len = self.needed_length(n_rows)
        self.reserve(kv_len, n_rows)
        dev = self.keys[0].device
        return torch.arange(n_rows, device=dev), torch.tensor(self.lengths[:n_rows], device=dev), kv_len

    @staticmethod
    def decode_mask(positions: torch.Tensor, kv_len: int, dtype: torch.dtype, device) -> torch.Tensor:
        """Additive mask [n, 1, 1, kv_len]: row i sees positions 0..positions[i] (its new token last)."""
        visible = torch.arange(kv_len, device=positions.device)[None, :] <= positions[:, None]
        return _additive(visible, dtype, device)[:, None, None, :]

    def decode_cache(self, n_rows: int) -> DecodeCache:
        """The Cache for one decode step of rows 0..n_rows-1 (each adds one token)."""
        self.reserve(self.needed_length(n_rows), n_rows)
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


class _ExtendLayer(CacheLayerMixin):
    """One layer of a forward that appends `T` tokens to one row after its first `start` positions."""

    def __init__(self, store: SlotKVCache, layer: int, slot: int, start: int) -> None:
        super().__init__()
        self.store, self.layer, self.slot, self.start = store, layer, slot, start
        self.is_initialized = True

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        return None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        end = self.start + key_states.shape[2]
        k_buf, v_buf = self.store.keys[self.layer], self.store.values[self.layer]
        k_buf[self.slot, :, self.start : end] = key_states[0].to(k_buf.dtype)
        v_buf[self.slot, :, self.start : end] = value_states[0].to(v_buf.dtype)
        return k_buf[self.slot : self.slot + 1, :, :end], v_buf[self.slot : self.slot + 1, :, :end]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.start + query_length, 0

    def get_seq_length(self) -> int:
        return self.start

    def get_max_length(self) -> int:
        return -1


class ExtendCache(Cache):
    """The `transformers.Cache` of a forward over tokens start..start+T-1 of one row (batch of one),
    whose first `start` keys and values are already in the slot cache."""

    def __init__(self, store: SlotKVCache, slot: int, start: int, new_tokens: int) -> None:
        store.reserve(start + new_tokens, slot + 1)
        super().__init__(layers=[_ExtendLayer(store, i, slot, start) for i in range(store.num_layers)])
        self.start, self.new_tokens = start, new_tokens

    def attention_mask(self, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
        """Additive mask [1, 1, T, start+T]: new token i sees positions 0..start+i."""
        keys = torch.arange(self.start + self.new_tokens)
        visible = keys[None, :] <= (self.start + torch.arange(self.new_tokens))[:, None]
        return _additive(visible, dtype, device)[None, None]

    def position_ids(self, device: torch.device | str) -> torch.Tensor:
        return torch.arange(self.start, self.start + self.new_tokens, device=device)[None, :]


# ---------------------------------------------------------------------- prefix reuse


@dataclass
class PrefixEntry:
    """The keys and values of positions 0..len(tokens)-1 of a finished request, per layer [H, T, D]."""

    tokens: list[int]
    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class PrefixCache:
    """Finished requests' keys and values by token ids, least recently used first out."""

    def __init__(self, max_entries: int = 256, min_reuse: int = 32) -> None:
        self.max_entries = max_entries
        self.min_reuse = min_reuse  # shorter common prefixes are prefilled (batched) instead
        self._entries: collections.OrderedDict[tuple[int, ...], PrefixEntry] = collections.OrderedDict()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: list[int]) -> tuple[PrefixEntry, int] | None:
        """The entry sharing the longest prefix with `prompt` and that prefix's length, leaving at
        least the prompt's last token to compute (its logits start the completion); None below
        `min_reuse` tokens."""
        best: tuple[PrefixEntry, int] | None = None
        limit = len(prompt) - 1
        for entry in self._entries.values():
            n = _common_prefix(entry.tokens, prompt, limit)
            if n >= self.min_reuse and (best is None or n > best[1]):
                best = (entry, n)
        if best is not None:
            self._entries.move_to_end(tuple(best[0].tokens))
        return best

    def insert(self, entry: PrefixEntry) -> None:
        """Add `entry`; entries it extends are dropped (the longer one serves their prompts too)."""
        n = len(entry.tokens)
        for key, old in list(self._entries.items()):
            common = _common_prefix(old.tokens, entry.tokens, n)
            if common == n:
                self._entries.move_to_end(key)  # already covered
                return
            if common == len(old.tokens):
                self._drop(key)
        self._entries[tuple(entry.tokens)] = entry
        self.nbytes += entry.nbytes
        while len(self._entries) > self.max_entries:
            self.evict_one()

    def evict_one(self, keep: Sequence[PrefixEntry] = ()) -> bool:
        """Drop the least recently used entry not in `keep`; False when there is none."""
        for key, entry in self._entries.items():
            if not any(entry is k for k in keep):
                self._drop(key)
                return True
        return False

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def _drop(self, key: tuple[int, ...]) -> None:
        self.nbytes -= self._entries.pop(key).nbytes


def _common_prefix(a: list[int], b: list[int], limit: int) -> int:
    """Length of the longest common prefix of `a` and `b`, at most `limit`. Compares slices (in C) of
    doubling size, then bisects the first that differs: the cost follows the common part, not the
    lists' length, so entries that share only a system prompt are cheap to rule out."""
    hi = min(len(a), len(b), limit)
    lo, step = 0, 64  # a[:lo] == b[:lo] holds
    while lo < hi:
        end = min(lo + step, hi)
        if a[lo:end] == b[lo:end]:
            lo, step = end, step * 2
            continue
        while end - lo > 1:  # a[:end] != b[:end]
            mid = (lo + end) // 2
            if a[lo:mid] == b[lo:mid]:
                lo = mid
            else:
                end = mid
        return lo
    return lo


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
