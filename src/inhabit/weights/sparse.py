"""Sparse delta encoding: where the bit patterns changed, and by how much.

Between two optimizer steps at RL learning rates only a few percent of bf16 weights change, and
a changed weight almost always moves by one or two ulps. XOR of bit patterns + zstd spends ~19
bits per changed element on that; this encoding spends ~8-10:

- positions as gaps between changed indices, one byte each. Gaps of a random sparse mask are
  geometric, so zstd's Huffman stage gets close to their entropy. Gaps over 255 are escaped: a
  side stream holds (index, gap) pairs, so the decoder patches them in without testing every gap;
- values as the difference of the bit patterns, new - old in wrapping integer arithmetic, one
  signed byte each (escaped like gaps when outside -127..127). For two floats of the same sign
  the bit-pattern difference is the distance in ulps, so it is small, and wrapping arithmetic
  makes it exact for everything else (sign flips, NaN, inf, -0.0). Huffman coding does not care
  which byte stands for -1, so two's complement costs nothing against zigzag and decodes in one
  widening cast;
- the value bytes split into buckets by the *old* exponent, each its own zstd frame with its own
  Huffman table: small weights move by more ulps than large ones, and the decoder knows the old
  exponent, so the split costs nothing to transmit but a few thresholds.

All steps are vectorized numpy over the changed elements only, in blocks that stay in cache; the
decoder touches the base tensor only at the changed positions, so applying a delta in place
costs O(changes) plus the checksum pass.
"""

from __future__ import annotations

import struct

import numpy as np

from inhabit.weights import blob
from inhabit.weights.bits import DtypeInfo, exponent_key

VALUE_ESCAPE = -128
_META = struct.Struct("<QB")  # k (changed elements), number of value buckets; then u16 thresholds
MIN_BUCKET_ELEMENTS = 16384
"""Below this many changes per bucket, the frame and table overhead outweighs the gain."""
CHUNK = 1 << 16
"""Changes decoded per block: the temporaries of one block stay in cache, which is what makes
decoding fast; a whole-tensor pass per numpy op would stream every temporary through memory."""


def zigzag(diff: np.ndarray, info: DtypeInfo) -> np.ndarray:
    """Wrapping difference (unsigned) -> small unsigned: 0, -1, 1, -2, ... -> 0, 1, 2, 3, ..."""
    s = diff.view(info.sint)
    return ((s << 1) ^ (s >> (8 * info.itemsize - 1))).view(info.uint)


def unzigzag(z: np.ndarray, info: DtypeInfo) -> np.ndarray:
    """The inverse of `zigzag`, as a wrapping unsigned difference."""
    one = info.uint.type(1)
    return (z >> one) ^ (info.uint.type(0) - (z & one))


def _escapes(index: np.ndarray, values: np.ndarray) -> bytes:
    """Side stream of (u64 index, u64 value) pairs."""
    pairs = np.empty((index.size, 2), dtype="<u8")
    pairs[:, 0] = index
    pairs[:, 1] = values
    return pairs.tobytes()


def _read_escapes(data: bytes) -> tuple[np.ndarray, np.ndarray]:
    blob.require(len(data) % 16 == 0, "sparse escape stream is torn")
    pairs = np.frombuffer(data, dtype="<u8").reshape(-1, 2)
    return pairs[:, 0].astype(np.int64), pairs[:, 1]


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
    big = np.flatnonzero(gaps > 255)
    g8 = gaps.astype(np.uint8)
    g8[big] = 0  # a gap is never 0, so 0 marks "see the escape stream"
    old = base[pos]
    diff = (new[pos] - old).view(info.sint)
    wide = np.flatnonzero((diff < -127) | (diff > 127))
    d8 = diff.astype(np.int8)
    d8[wide] = VALUE_ESCAPE

    key = exponent_key(old, info)
    thresholds: list[int] = []
    if key is not None and buckets > 1 and k >= 2 * MIN_BUCKET_ELEMENTS:
        thresholds = _thresholds(key, min(buckets, k // MIN_BUCKET_ELEMENTS), info)
    gap_ctx = blob.cctx(gap_level, min_match=7)
    value_ctx = blob.cctx(value_level, min_match=7)
    streams = [
        blob.compress_stream(g8, gap_ctx),
        blob.compress_stream(_escapes(big, gaps[big]), gap_ctx),
    ]
    if thresholds:
        ids = _bucket_ids(old, thresholds, info)
        streams += [
            blob.compress_stream(d8[np.flatnonzero(ids == b)], value_ctx) for b in range(len(thresholds) + 1)
        ]
    else:
        streams.append(blob.compress_stream(d8, value_ctx))
    streams.append(blob.compress_stream(_escapes(wide, diff[wide].view(info.uint)), gap_ctx))
    meta = _META.pack(k, len(thresholds) + 1) + struct.pack(f"<{len(thresholds)}H", *thresholds)
    return meta, streams


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
    gap_idx, gap_val = _read_escapes(b.streams[1])
    parts = [np.frombuffer(s, dtype=np.int8) for s in b.streams[2 : 2 + n_buckets]]
    val_idx, val_val = _read_escapes(b.streams[-1])
    blob.require(g8.size == k and sum(p.size for p in parts) == k, "sparse streams have the wrong length")

    undo: list[tuple[np.ndarray, np.ndarray]] = []
    used_part = [0] * n_buckets
    last = -1
    try:
        for c0 in range(0, k, CHUNK):
            c1 = min(k, c0 + CHUNK)
            gaps = g8[c0:c1].astype(np.int64)
            lo, hi = np.searchsorted(gap_idx, (c0, c1))
            if hi > lo:
                gaps[gap_idx[lo:hi] - c0] = gap_val[lo:hi]
            gaps[0] += last
            pos = np.cumsum(gaps)
            # Intact gaps are >= 1, so positions only grow and checking the ends bounds them all;
            # corrupt escapes are caught here or by IndexError, anything else by the checksum.
            blob.require(int(pos[0]) > last and int(pos[-1]) < target.size, "sparse positions out of range")
            last = int(pos[-1])
            old = target[pos]
            if n_buckets > 1:
                ids = _bucket_ids(old, thresholds, info)
                d8 = np.empty(pos.size, dtype=np.int8)
                for bucket in range(n_buckets):
                    # flatnonzero + integer indexing: boolean-mask assignment with a random mask
                    # is several times slower (branchy) in numpy.
                    where = np.flatnonzero(ids == bucket)
                    u = used_part[bucket]
                    blob.require(u + where.size <= parts[bucket].size, "sparse value bucket is short")
                    d8[where] = parts[bucket][u : u + where.size]
                    used_part[bucket] = u + where.size
            else:
                d8 = parts[0][c0:c1]
            diff = d8.astype(info.sint)  # sign-extends: -1 stays -1 at full width
            lo, hi = np.searchsorted(val_idx, (c0, c1))
            if hi > lo:
                diff[val_idx[lo:hi] - c0] = val_val[lo:hi].astype(info.uint).view(info.sint)
            target[pos] = old + diff.view(info.uint)  # wrapping add: exact for any bit pattern
            undo.append((pos, old))
    except IndexError:
        revert(target, undo)
        raise blob.CorruptBlob("sparse positions or escapes out of range") from None
    except blob.CorruptBlob:
        revert(target, undo)
        raise
    return undo


def revert(target: np.ndarray, undo: list[tuple[np.ndarray, np.ndarray]]) -> None:
    """Undo `apply`: put the old values back."""
    for pos, old in reversed(undo):
        target[pos] = old
