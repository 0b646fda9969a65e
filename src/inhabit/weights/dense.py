"""Dense encodings: the whole tensor, as byte planes, for when most elements changed (or no base).

A tensor of w-byte elements is split into w planes (all low bytes, then the next byte, ...), each
compressed as its own zstd frame: the high byte of a bf16 weight (sign and most of the exponent)
is very repetitive while the low byte is close to random, and mixing them hides that from zstd.

- `full`: the bit patterns themselves (snapshots, or deltas where nearly everything changed);
- `xor`: new XOR old, the representation most RL weight-sync systems use today;
- `diff`: zigzag(new - old) in wrapping arithmetic, which for small ulp moves leaves far fewer
  set bits than XOR does (a +1 ulp move across a carry flips many bits but differs by 1).
"""

from __future__ import annotations

import numpy as np

from inhabit.weights import blob
from inhabit.weights.bits import DtypeInfo
from inhabit.weights.sparse import unzigzag, zigzag


def planes(bits: np.ndarray, info: DtypeInfo) -> list[np.ndarray]:
    """Byte planes of a flat unsigned array, lowest byte first (contiguous copies)."""
    if info.itemsize == 1:
        return [bits.view(np.uint8)]
    grid = bits.view(np.uint8).reshape(-1, info.itemsize)
    return [np.ascontiguousarray(grid[:, i]) for i in range(info.itemsize)]


def join_planes(streams: list[bytes], n: int, info: DtypeInfo) -> np.ndarray:
    """The inverse of `planes`: a flat unsigned array of n elements."""
    blob.require(len(streams) == info.itemsize, "dense blob has the wrong number of planes")
    for s in streams:
        blob.require(len(s) == n, "dense plane has the wrong length")
    if info.itemsize == 1:
        return np.frombuffer(streams[0], dtype=np.uint8).copy()
    grid = np.empty((n, info.itemsize), dtype=np.uint8)
    for i, s in enumerate(streams):
        grid[:, i] = np.frombuffer(s, dtype=np.uint8)
    return grid.reshape(-1).view(info.uint)


MT_PLANE_BYTES = 8 << 20
"""Planes at least this big are compressed by zstd's own worker threads when asked to."""


def encode_planes(
    values: np.ndarray, info: DtypeInfo, level: int, threads: int = 0
) -> list[tuple[int, bytes]]:
    out = []
    for p in planes(values, info):
        ctx = blob.cctx(level, threads=threads if p.nbytes >= MT_PLANE_BYTES else 0)
        out.append(blob.compress_stream(p, ctx))
    return out


def transform(kind: str, new: np.ndarray, base: np.ndarray | None, info: DtypeInfo) -> np.ndarray:
    """What a dense encoding stores for `new` given `base`."""
    if kind == "full":
        return new
    assert base is not None, "delta encodings need a base"
    if kind == "xor":
        return new ^ base
    return zigzag(new - base, info)


def untransform(kind: str, stored: np.ndarray, base: np.ndarray | None, info: DtypeInfo) -> np.ndarray:
    """The inverse of `transform`: the new bit patterns."""
    if kind == "full":
        return stored
    blob.require(base is not None, f"a {kind} delta needs its base tensor")
    assert base is not None
    if kind == "xor":
        return stored ^ base
    return base + unzigzag(stored, info)
