"""Sparse delta encoding: where the bit patterns changed, and by how much.

Between two optimizer steps at RL learning rates only a few percent of bf16 weights change, and
a changed weight almost always moves by one or two ulps. Raw XOR + zstd spends ~19 bits per
changed element on that; this encoding spends ~8-10:

- positions as gaps between changed indices, one byte each (255 escapes to a side stream of
  uint64 gaps). Gaps of a random sparse mask are geometric, so zstd's Huffman stage gets close
  to their entropy;
- values as the difference of the bit patterns, new - old in wrapping unsigned arithmetic,
  zigzag-mapped to small unsigned integers (+1 -> 2, -1 -> 1, ...). For two floats of the same
  sign the bit-pattern difference is the distance in ulps, so it is small, and wrapping
  arithmetic makes it exact for everything else (sign flips, NaN, inf). One byte each, 255
  escapes to a side stream at full width;
- the value bytes split into buckets by the *old* exponent, each its own zstd frame with its own
  Huffman table: small weights move by more ulps than large ones, and the decoder knows the old
  exponent, so the split costs nothing to transmit but a few thresholds.

All steps are vectorized numpy over the changed elements only; the decoder touches the base
tensor only at the changed positions, so applying a delta in place costs O(changes).
"""

from __future__ import annotations

import struct

import numpy as np

from inhabit.weights import blob
from inhabit.weights.bits import DtypeInfo, exponent_key

ESCAPE = 255
_META = struct.Struct("<QB")  # k (changed elements), number of value buckets; then u16 thresholds
MIN_BUCKET_ELEMENTS = 16384
"""Below this many changes per bucket, the frame and table overhead outweighs the gain."""


def zigzag(diff: np.ndarray, info: DtypeInfo) -> np.ndarray:
    """Wrapping difference (unsigned) -> small unsigned: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ..."""
    s = diff.view(info.sint)
    return ((s << 1) ^ (s >> (8 * info.itemsize - 1))).view(info.uint)


def unzigzag(z: np.ndarray, info: DtypeInfo) -> np.ndarray:
    """The inverse of `zigzag`, as a wrapping unsigned difference."""
    one = info.uint.type(1)
    return (z >> one) ^ (info.uint.type(0) - (z & one))


def _thresholds(key: np.ndarray, buckets: int, info: DtypeInfo) -> list[int]:
    """Exponent values that split `key` into `buckets` groups of about equal size."""
    counts = np.bincount(key, minlength=1 << info.exponent_bits)
    cum = np.cumsum(counts)
    cuts = [int(np.searchsorted(cum, key.size * i / buckets, side="right")) for i in range(1, buckets)]
    return sorted({c for c in cuts if 0 < c < counts.size})


def _bucket_ids(old: np.ndarray, thresholds: list[int], info: DtypeInfo) -> np.ndarray:
    """Bucket of each old value: how many thresholds its exponent reaches (0..len(thresholds)).

    Compares the magnitude bits against threshold << mantissa_bits instead of extracting the
    exponent: the same answer in fewer passes over memory (this is on the decode hot path).
    """
    assert info.mantissa_bits is not None
    magnitude = old & info.uint.type((1 << (8 * info.itemsize - 1)) - 1)
    ids = np.zeros(old.size, dtype=np.uint8)
    for t in thresholds:
        ids += (magnitude >= info.uint.type(t << info.mantissa_bits)).view(np.uint8)
    return ids


def encode(
    new: np.ndarray,
    base: np.ndarray,
    pos: np.ndarray,
    info: DtypeInfo,
    gap_level: int,
    value_level: int,
    buckets: int,
) -> tuple[bytes, list[tuple[int, bytes]]]:
    """Encode the changes at `pos` (sorted indices where new != base): (meta, streams)."""
    k = pos.size
    gaps = np.diff(pos, prepend=-1)
    g8 = np.minimum(gaps, ESCAPE).astype(np.uint8)
    gap_over = gaps[np.flatnonzero(g8 == ESCAPE)].astype("<u8")
    old = base[pos]
    z = zigzag(new[pos] - old, info)
    d8 = np.minimum(z, ESCAPE).astype(np.uint8)
    value_over = z[np.flatnonzero(d8 == ESCAPE)]

    key = exponent_key(old, info)
    thresholds: list[int] = []
    if key is not None and buckets > 1 and k >= 2 * MIN_BUCKET_ELEMENTS:
        thresholds = _thresholds(key, min(buckets, k // MIN_BUCKET_ELEMENTS), info)
    gap_ctx = blob.cctx(gap_level, min_match=7)
    value_ctx = blob.cctx(value_level, min_match=7)
    streams = [blob.compress_stream(g8, gap_ctx), blob.compress_stream(gap_over, gap_ctx)]
    if thresholds:
        ids = _bucket_ids(old, thresholds, info)
        streams += [
            blob.compress_stream(d8[np.flatnonzero(ids == b)], value_ctx) for b in range(len(thresholds) + 1)
        ]
    else:
        streams.append(blob.compress_stream(d8, value_ctx))
    streams.append(blob.compress_stream(value_over, gap_ctx))
    meta = _META.pack(k, len(thresholds) + 1) + struct.pack(f"<{len(thresholds)}H", *thresholds)
    return meta, streams


CHUNK = 1 << 16
"""Changes decoded per block: the temporaries of one block stay in cache, which is what makes
decoding fast; a whole-tensor pass per numpy op would stream every temporary through memory."""


def apply(b: blob.Blob, target: np.ndarray, info: DtypeInfo) -> list[tuple[np.ndarray, np.ndarray]]:
    """Write the changes of a parsed sparse blob into `target` in place.

    Returns (positions, old values) per block, which is what undoing the update takes. Raises
    CorruptBlob (leaving `target` as it was) if the streams are inconsistent.
    """
    blob.require(len(b.meta) >= _META.size, "sparse meta is truncated")
    k, n_buckets = _META.unpack_from(b.meta, 0)
    blob.require(len(b.meta) == _META.size + 2 * (n_buckets - 1), "sparse meta has the wrong length")
    blob.require(len(b.streams) == n_buckets + 3, "sparse blob has the wrong number of streams")
    blob.require(n_buckets == 1 or info.mantissa_bits is not None, "bucketed values on an integer dtype")
    thresholds = list(struct.unpack_from(f"<{n_buckets - 1}H", b.meta, _META.size))
    g8 = np.frombuffer(b.streams[0], dtype=np.uint8)
    gap_over = np.frombuffer(b.streams[1], dtype="<u8")
    parts = [np.frombuffer(s, dtype=np.uint8) for s in b.streams[2 : 2 + n_buckets]]
    value_over = np.frombuffer(b.streams[-1], dtype=info.uint)
    blob.require(g8.size == k and sum(p.size for p in parts) == k, "sparse streams have the wrong length")

    one, zero = info.uint.type(1), info.uint.type(0)
    undo: list[tuple[np.ndarray, np.ndarray]] = []
    used_gap = used_value = 0
    used_part = [0] * n_buckets
    last = -1
    try:
        for c0 in range(0, k, CHUNK):
            gaps = g8[c0 : c0 + CHUNK].astype(np.int64)
            esc = np.flatnonzero(gaps == ESCAPE)
            if esc.size:
                gaps[esc] = gap_over[used_gap : used_gap + esc.size]
                used_gap += esc.size
            pos = np.cumsum(gaps)
            pos += last
            # Intact gaps are >= 1, so positions only grow and checking the ends bounds them all;
            # a corrupt escape can wrap negative (caught here) and anything else by the checksum.
            blob.require(int(pos[0]) > last and int(pos[-1]) < target.size, "sparse positions out of range")
            last = int(pos[-1])
            old = target[pos]
            if n_buckets > 1:
                ids = _bucket_ids(old, thresholds, info)
                d8 = np.empty(pos.size, dtype=np.uint8)
                for bucket in range(n_buckets):
                    # flatnonzero + integer indexing: boolean-mask assignment with a random mask
                    # is several times slower (branchy) in numpy.
                    where = np.flatnonzero(ids == bucket)
                    u = used_part[bucket]
                    blob.require(u + where.size <= parts[bucket].size, "sparse value bucket is short")
                    d8[where] = parts[bucket][u : u + where.size]
                    used_part[bucket] = u + where.size
            else:
                d8 = parts[0][c0 : c0 + CHUNK]
            z = d8.astype(info.uint)
            esc = np.flatnonzero(d8 == ESCAPE)
            if esc.size:
                z[esc] = value_over[used_value : used_value + esc.size]
                used_value += esc.size
            blob.require(z.size == pos.size, "sparse value escapes are short")
            # new = old + unzigzag(z), in wrapping unsigned arithmetic.
            target[pos] = old + ((z >> one) ^ (zero - (z & one)))
            undo.append((pos, old))
        blob.require(used_gap == gap_over.size and used_value == value_over.size, "sparse escapes do not match")
    except blob.CorruptBlob:
        revert(target, undo)
        raise
    return undo


def revert(target: np.ndarray, undo: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Undo `apply`: put the old values back."""
    for pos, old in reversed(undo):
        target[pos] = old
