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

The decoder touches the base tensor only at the changed positions, so applying a delta in place
costs O(changes) plus the checksum pass. It runs as one compiled loop over the changes
(`_sparse_kernel.c`, built at install) or, where that is not built, as vectorized numpy over
blocks of changes that stay in cache; both write the same bits. The encoder is numpy only.
"""

from __future__ import annotations

import struct
import sys
from collections.abc import Iterator

import numpy as np

from inhabit.errors import WeightsError
from inhabit.weights import blob
from inhabit.weights.bits import DtypeInfo, exponent_key

try:  # the compiled inner loop of `apply` (_sparse_kernel.c); absent where it was not built
    from inhabit.weights import _sparse_kernel as _kernel
except ImportError:
    _kernel = None
if sys.byteorder != "little":  # the loop reads the little-endian streams as native integers
    _kernel = None
COMPILED = _kernel is not None
"""Whether the compiled loop is built here (what `apply` uses by default)."""


def _hand_over_xxh3() -> bool:
    """Give the compiled loop xxhash's streaming xxh3-64, so that it checksums each region of the
    target while the region is in cache (see `_sparse_kernel.c`). The functions are the ones the
    xxhash module exports from the library it already loaded; a self-test against
    `xxhash.xxh3_64_intdigest` must pass, or the checksum stays a separate pass."""
    if _kernel is None:
        return False
    try:
        import ctypes

        import xxhash
        from xxhash import _xxhash

        lib = ctypes.CDLL(_xxhash.__file__)
        # The dispatching update picks the widest vector unit at run time (2x the baseline one).
        update = (
            "XXH3_64bits_update_dispatch"
            if hasattr(lib, "XXH3_64bits_update_dispatch")
            else "XXH3_64bits_update"
        )
        names = ("XXH3_createState", "XXH3_freeState", "XXH3_64bits_reset", update, "XXH3_64bits_digest")
        _kernel.set_hash(*(ctypes.cast(getattr(lib, name), ctypes.c_void_p).value or 0 for name in names))
        # A known delta across several regions and a partial one: +1 on every 10th element.
        target = np.arange(20_011, dtype=np.uint16)
        want = target.copy()
        want[::10] += 1
        k = want[::10].size
        old = np.empty(k, dtype=np.uint16)
        g8 = bytes([1] + [10] * (k - 1))
        done, err, digest = _kernel.apply(target, old, g8, b"", (bytes([1]) * k,), (), b"", 2, True)
        return (
            done == k
            and err == 0
            and np.array_equal(target, want)
            and digest == xxhash.xxh3_64_intdigest(want)
        )
    except (ImportError, OSError, AttributeError, ValueError):
        return False


HASHED = _hand_over_xxh3()
"""Whether the compiled loop takes each tensor's checksum as it writes (else a separate pass)."""

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


def _read_escapes(data: bytes, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(indices as int64, values) of an escape stream, its indices checked: strictly increasing
    and below k (what lets a decoder find the escapes of a block by binary search)."""
    blob.require(len(data) % 16 == 0, "sparse escapes are torn, out of order or out of range")
    pairs = np.frombuffer(data, dtype="<u8").reshape(-1, 2)
    index = pairs[:, 0].astype(np.int64)
    if index.size:
        blob.require(
            int(index[0]) >= 0 and int(index[-1]) < k and bool((index[1:] > index[:-1]).all()),
            "sparse escapes are torn, out of order or out of range",
        )
    return index, pairs[:, 1]


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


def apply(b: blob.Blob, target: np.ndarray, info: DtypeInfo, *, compiled: bool | None = None) -> Undo:
    """Write the changes of a parsed sparse blob into `target` (flat, contiguous) in place.

    Returns what undoing the update takes (`revert`), and the target's checksum when the decoder
    took it on the way (`Undo.checksum`). Raises CorruptBlob (leaving `target` as it
    was) if the streams are inconsistent. `compiled` picks the compiled loop (True), numpy
    (False) or the compiled loop where it is built and `target` suits it (None); both write the
    same bits and refuse the same escape streams.
    """
    blob.require(len(b.meta) >= _META.size, "sparse meta is truncated")
    k, n_buckets = _META.unpack_from(b.meta, 0)
    blob.require(len(b.meta) == _META.size + 2 * (n_buckets - 1), "sparse meta has the wrong length")
    blob.require(len(b.streams) == n_buckets + 3, "sparse blob has the wrong number of streams")
    blob.require(n_buckets == 1 or info.mantissa_bits is not None, "bucketed values on an integer dtype")
    thresholds = struct.unpack_from(f"<{n_buckets - 1}H", b.meta, _META.size)
    parts = b.streams[2 : 2 + n_buckets]
    blob.require(
        len(b.streams[0]) == k and sum(len(p) for p in parts) == k, "sparse streams have the wrong length"
    )
    undo = Undo(k, b.streams[0], b.streams[1], target.size, np.empty(k, dtype=info.uint))
    suitable = bool(target.flags.c_contiguous and target.flags.writeable)
    if compiled is None:
        compiled = _kernel is not None and suitable
    if compiled:
        if _kernel is None:
            raise WeightsError("the compiled sparse decoder is not built (see _sparse_kernel.c)")
        if not suitable:
            raise WeightsError("the compiled sparse decoder needs a contiguous, writable target")
        # Thresholds on the exponent, as the magnitude bits they start at (see `_bucket_ids`).
        cuts = tuple(int(t) << (info.mantissa_bits or 0) for t in thresholds)
        # The streams go in as stored: the loop reads the escape pairs itself, so a delta costs
        # no numpy arrays besides the old values.
        args = (
            target,
            undo.old,
            b.streams[0],
            b.streams[1],
            tuple(parts),
            cuts,
            b.streams[-1],
            info.itemsize,
        )
        # A loop built from an older _sparse_kernel.c (no set_hash: HASHED is False) takes no
        # hash argument and answers (done, error); this one answers the checksum too.
        result = _kernel.apply(*args, True) if HASHED else _kernel.apply(*args)
        done, err = result[0], result[1]
        undo.checksum = result[2] if len(result) > 2 else None
        undo.done = done
        if err:
            revert(target, undo)
            raise blob.CorruptBlob(_KERNEL_ERRORS.get(err, f"sparse decoder error {err}"))
        return undo
    val_idx, val_val = _read_escapes(b.streams[-1], k)
    try:
        _apply_numpy(
            target,
            undo,
            [np.frombuffer(p, dtype=np.int8) for p in parts],
            list(thresholds),
            val_idx,
            val_val.astype(info.uint).view(info.sint),
            info,
        )
    except IndexError:
        revert(target, undo)
        raise blob.CorruptBlob("sparse positions or escapes out of range") from None
    except blob.CorruptBlob:
        revert(target, undo)
        raise
    return undo


_KERNEL_ERRORS = {
    1: "sparse positions out of range",
    2: "sparse gap is zero where no gap escape is",
    3: "sparse value bucket is short",
    4: "sparse value is escaped where no value escape is",
    5: "sparse escapes are left over",
    6: "sparse escapes are torn, out of order or out of range",
}


def _apply_numpy(
    target: np.ndarray,
    undo: Undo,
    parts: list[np.ndarray],
    thresholds: list[int],
    val_idx: np.ndarray,
    val_wide: np.ndarray,
    info: DtypeInfo,
) -> None:
    """`apply` in numpy, a block of changes at a time (see CHUNK)."""
    if undo.k == 0:
        return
    n_buckets = len(parts)
    m = min(undo.k, CHUNK)
    pos_buf = np.empty(m, dtype=np.int64)
    diff_buf = np.empty(m, dtype=info.sint)
    d8_buf = np.empty(m, dtype=np.int8)
    v_lo = np.searchsorted(val_idx, np.arange(0, undo.k, CHUNK))
    v_hi = np.append(v_lo[1:], val_idx.size)
    used_part = [0] * n_buckets
    for ci, pos in enumerate(undo.blocks(pos_buf)):
        c0 = ci * CHUNK
        c1 = c0 + pos.size
        old = undo.old[c0:c1]
        # mode="clip" skips numpy's bounds check and buffered copy: `blocks` checked the ends.
        np.take(target, pos, out=old, mode="clip")
        if n_buckets > 1:
            d8 = d8_buf[: pos.size]
            ids = _bucket_ids(old, thresholds, info)
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
        diff = diff_buf[: pos.size]
        np.copyto(diff, d8)  # sign-extends: -1 stays -1 at full width
        lo, hi = v_lo[ci], v_hi[ci]
        if hi > lo:
            diff[val_idx[lo:hi] - c0] = val_wide[lo:hi]
        new = diff.view(info.uint)
        np.add(old, new, out=new)  # wrapping add: exact for any bit pattern
        target[pos] = new
        undo.done = c1


class Undo:
    """What `revert` needs: the old values of the changed elements, and how to find them again.

    Positions are decoded again from the gap streams instead of kept: the decoders then need no
    array of positions per change, for a cost paid only when a delta fails.
    """

    def __init__(self, k: int, g8: bytes, gap_escapes: bytes, size: int, old: np.ndarray) -> None:
        self.k, self.g8, self.gap_escapes, self.size, self.old = k, g8, gap_escapes, size, old
        self.done = 0
        """Changes written to the target so far (the first `done`)."""
        self.checksum: int | None = None
        """xxh3-64 of the whole target after a complete update, where the decoder took it on the
        way (the compiled loop, see HASHED); None: the caller hashes the target itself."""

    def blocks(self, buf: np.ndarray, check: bool = True) -> Iterator[np.ndarray]:
        """Positions of each block of up to CHUNK changes, decoded into `buf` (valid until the next).

        `check=False` is for `revert`, which reads only the positions of changes already written
        (the ones after a corrupt gap may be anything)."""
        gap_idx, gap_val = _read_escapes(self.gap_escapes, self.k)
        gap_val = gap_val.astype(np.int64)
        # The rules the compiled loop checks too; they make positions strictly increasing, so
        # the two ends of a block bound all of it.
        blob.require(
            gap_val.size == 0 or (int(gap_val.min()) >= 1 and int(gap_val.max()) <= self.size),
            "sparse escapes are torn, out of order or out of range",
        )
        g8 = np.frombuffer(self.g8, dtype=np.uint8)
        g_lo = np.searchsorted(gap_idx, np.arange(0, self.k, CHUNK))
        g_hi = np.append(g_lo[1:], gap_idx.size)
        last = -1
        for ci, c0 in enumerate(range(0, self.k, CHUNK)):
            c1 = min(self.k, c0 + CHUNK)
            pos = buf[: c1 - c0]
            pos[...] = g8[c0:c1]
            lo, hi = g_lo[ci], g_hi[ci]
            if hi > lo:
                pos[gap_idx[lo:hi] - c0] = gap_val[lo:hi]  # the escape wins over the gap byte
            pos[0] += last
            np.cumsum(pos, out=pos)
            # A zero byte outside the escapes only repeats a position: they never decrease.
            if check:
                blob.require(int(pos[0]) > last and int(pos[-1]) < self.size, "sparse positions out of range")
            last = int(pos[-1])
            yield pos


def revert(target: np.ndarray, undo: Undo) -> None:
    """Undo `apply`: put the old values back."""
    if undo.done == 0:
        return
    buf = np.empty(min(undo.k, CHUNK), dtype=np.int64)
    for ci, pos in enumerate(undo.blocks(buf, check=False)):
        c0 = ci * CHUNK
        if c0 >= undo.done:
            break
        n = min(pos.size, undo.done - c0)
        target[pos[:n]] = undo.old[c0 : c0 + n]
