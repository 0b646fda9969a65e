"""The weight codec: encode one tensor of version v+1 against version v, losslessly.

    enc = encode(new_bits, "bfloat16", base=old_bits)         # -> Encoded(blob, encoding, ...)
    new = decode(enc.blob, "bfloat16", base=old_bits)          # bit-identical to new_bits

Tensors are flat unsigned bit-pattern arrays (see `bits.py`). Per tensor the encoder picks the
smallest of the representations that make sense for how much changed:

- `same`: nothing changed (an empty blob plus checksum);
- `sparse`: positions and small value differences of the changed elements (`sparse.py`);
- `diff` / `xor` / `full`: dense byte planes (`dense.py`), when most elements changed, or for a
  snapshot (no base).

Every blob carries xxh3-64 of the decoded tensor, and `decode` verifies it: a corrupt blob or
the wrong base raises ChecksumMismatch (never returns wrong weights). Decoding in place touches
only the changed elements for sparse deltas and leaves the base untouched when it fails.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xxhash
from pydantic import Field

from inhabit.config import Config
from inhabit.errors import ChecksumMismatch, WeightsError
from inhabit.weights import blob, dense, sparse
from inhabit.weights.bits import dtype_info

ENCODINGS = ("same", "sparse", "diff", "xor", "full")
_CODE = {name: i for i, name in enumerate(ENCODINGS)}


class CodecConfig(Config):
    """Knobs of the codec; the defaults are tuned on bf16 AdamW deltas (see bench/weights.py)."""

    level: int = Field(3, ge=1, le=22, description="zstd level for positions and dense byte planes.")
    value_level: int = Field(
        9, ge=1, le=22, description="zstd level for sparse value bytes (small, so a high level is cheap)."
    )
    buckets: int = Field(
        2, ge=1, le=16, description="Split sparse values into this many groups by old exponent."
    )
    sparse_below: float = Field(
        0.4, ge=0.0, le=1.0, description="Changed fraction under which only the sparse encoding is tried."
    )
    threads: int = Field(
        0,
        ge=0,
        le=256,
        description="zstd worker threads for dense planes of 8 MiB or more (big snapshot tensors); 0 = off.",
    )
    dense_above: float = Field(
        0.7, ge=0.0, le=1.0, description="Changed fraction over which only dense encodings are tried."
    )


@dataclass(frozen=True)
class Encoded:
    """One encoded tensor."""

    blob: bytes
    encoding: str
    checksum: int
    """xxh3-64 of the tensor's bytes after decoding."""
    changed: int
    """Elements whose bit pattern differs from the base (all of them for a snapshot)."""


def checksum(bits: np.ndarray) -> int:
    """xxh3-64 of an array's bytes (the per-tensor checksum)."""
    return xxhash.xxh3_64_intdigest(np.ascontiguousarray(bits).view(np.uint8))


def encode(
    new: np.ndarray, dtype: str, base: np.ndarray | None = None, config: CodecConfig | None = None
) -> Encoded:
    """Encode flat bit patterns `new`, as a delta against `base` when given (same dtype and size)."""
    cfg = config or CodecConfig()
    info = dtype_info(dtype)
    new = np.ascontiguousarray(new).reshape(-1).view(info.uint)
    n = new.size
    digest = checksum(new)
    if base is None:
        return Encoded(_dense("full", new, None, info, cfg, digest, 0), "full", digest, n)
    base = np.ascontiguousarray(base).reshape(-1).view(info.uint)
    if base.size != n:
        raise WeightsError(f"cannot encode a delta between tensors of {base.size} and {n} elements")
    base_digest = checksum(base)
    pos = np.flatnonzero(new != base)
    k = pos.size
    if k == 0:
        return Encoded(blob.pack(_CODE["same"], n, digest, base_digest, b"", []), "same", digest, 0)
    fraction = k / n
    candidates: list[tuple[str, bytes]] = []
    if fraction < cfg.dense_above:
        meta, streams = sparse.encode(new, base, pos, info, cfg.level, cfg.value_level, cfg.buckets)
        candidates.append(("sparse", blob.pack(_CODE["sparse"], n, digest, base_digest, meta, streams)))
    if fraction >= cfg.sparse_below:
        for kind in ("full", "diff", "xor"):  # full first: wins ties, needs no base
            candidates.append((kind, _dense(kind, new, base, info, cfg, digest, base_digest)))
    kind, data = min(candidates, key=lambda c: len(c[1]))
    return Encoded(data, kind, digest, k)


def _dense(kind: str, new: np.ndarray, base, info, cfg: CodecConfig, digest: int, base_digest: int) -> bytes:
    streams = dense.encode_planes(dense.transform(kind, new, base, info), info, cfg.level, cfg.threads)
    return blob.pack(_CODE[kind], new.size, digest, base_digest if kind != "full" else 0, b"", streams)


def peek(data: bytes | memoryview) -> tuple[str, int, int]:
    """(encoding, n_elements, checksum) of a blob, reading only its header."""
    code, n, digest = blob.header(data)
    blob.require(code < len(ENCODINGS), f"unknown encoding {code}")
    return ENCODINGS[code], n, digest


def decode(
    data: bytes | memoryview,
    dtype: str,
    base: np.ndarray | None = None,
    *,
    inplace: bool = False,
    compiled: bool | None = None,
) -> np.ndarray:
    """Decode a blob to flat bit patterns, verified against its checksum.

    With `inplace=True` (deltas only) the result is written into `base` and returned; if the
    checksum fails, `base` is restored before ChecksumMismatch is raised. `compiled` picks the
    sparse decoder (see `sparse.apply`; None: the compiled loop where it is built).
    """
    info = dtype_info(dtype)
    b = blob.unpack(data)
    blob.require(b.encoding < len(ENCODINGS), f"unknown encoding {b.encoding}")
    kind = ENCODINGS[b.encoding]
    given = base
    if base is not None:
        base = base.reshape(-1).view(info.uint)
        if kind != "full" and base.size != b.n_elements:
            raise WeightsError(f"delta is for {b.n_elements} elements but the base has {base.size}")
    elif kind != "full":
        raise WeightsError(f"a {kind} delta needs the base tensor it was encoded against")

    if kind == "sparse":
        assert base is not None
        out = base if inplace else base.copy()
        undo = sparse.apply(b, out, info, compiled=compiled)
        digest = undo.checksum if undo.checksum is not None else checksum(out)
        if digest != b.checksum:
            if inplace:
                sparse.revert(out, undo)
            _fail(kind, b, base)
        return given if inplace else out
    if kind == "same":
        assert base is not None
        out = base if inplace else base.copy()
    else:
        stored = dense.join_planes(b.streams, b.n_elements, info)
        out = dense.untransform(kind, stored, base, info)
    if checksum(out) != b.checksum:
        _fail(kind, b, base)
    if inplace and base is not None:
        if out is not base:
            base[...] = out
        return given
    return out


def _fail(kind: str, b: blob.Blob, base: np.ndarray | None) -> None:
    if base is not None and kind != "full" and checksum(base) != b.base_checksum:
        raise ChecksumMismatch(
            f"{kind} delta was applied to the wrong base tensor (base checksum differs): "
            "reload the parent version or fall back to a full snapshot"
        )
    raise ChecksumMismatch(f"decoded {kind} tensor does not match its checksum: the blob is corrupt")
