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


def decode_changes(
    b: blob.Blob, base: np.ndarray, info: DtypeInfo
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(positions, old values there, new values there) from a parsed sparse blob."""
    blob.require(len(b.meta) >= _META.size, "sparse meta is truncated")
    k, n_buckets = _META.unpack_from(b.meta, 0)
    blob.require(len(b.meta) == _META.size + 2 * (n_buckets - 1), "sparse meta has the wrong length")
    blob.require(len(b.streams) == n_buckets + 3, "sparse blob has the wrong number of streams")
    thresholds = list(struct.unpack_from(f"<{n_buckets - 1}H", b.meta, _META.size))

    g8 = np.frombuffer(b.streams[0], dtype=np.uint8)
    blob.require(g8.size == k, "sparse gap stream has the wrong length")
    gaps = g8.astype(np.int64)
    esc = np.flatnonzero(g8 == ESCAPE)
    gap_over = np.frombuffer(b.streams[1], dtype="<u8")
    blob.require(gap_over.size == esc.size, "sparse gap escapes do not match")
    gaps[esc] = gap_over
    pos = np.cumsum(gaps) - 1
    # Gaps are >= 1 when intact, so positions only grow: checking the ends bounds them all (a
    # corrupt escape can wrap negative; the checksum catches any other corruption).
    blob.require(k == 0 or (int(pos[0]) >= 0 and int(pos[-1]) < base.size), "sparse positions out of range")
    try:
        old = base[pos]
    except IndexError:
        raise blob.CorruptBlob("sparse positions out of range") from None

    if n_buckets > 1:
        blob.require(info.mantissa_bits is not None, "bucketed values on an integer dtype")
        ids = _bucket_ids(old, thresholds, info)
        d8 = np.empty(k, dtype=np.uint8)
        for bucket in range(n_buckets):
            # flatnonzero + integer indexing: boolean-mask assignment with a random mask is
            # several times slower (branchy) in numpy.
            where = np.flatnonzero(ids == bucket)
            part = np.frombuffer(b.streams[2 + bucket], dtype=np.uint8)
            blob.require(part.size == where.size, "sparse value bucket has the wrong length")
            d8[where] = part
    else:
        d8 = np.frombuffer(b.streams[2], dtype=np.uint8)
        blob.require(d8.size == k, "sparse value stream has the wrong length")
    z = d8.astype(info.uint)
    esc = np.flatnonzero(d8 == ESCAPE)
    value_over = np.frombuffer(b.streams[-1], dtype=info.uint)
    blob.require(value_over.size == esc.size, "sparse value escapes do not match")
    z[esc] = value_over
    return pos, old, old + unzigzag(z, info)
