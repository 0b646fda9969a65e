"""The byte layout of one encoded tensor (a "blob") and of the zstandard streams inside it.

A blob is self-describing, so a tensor can be decoded with nothing but the blob and (for deltas)
the base tensor:

    magic "IWB1" | encoding u8 | n_elements u64 | checksum u64 | base_checksum u64
    | meta_len u16 | meta | n_streams u8 | per stream: (codec u8, length u64) | stream bytes...

`checksum` is xxh3-64 of the decoded tensor's bytes, `base_checksum` that of the tensor the
delta applies to (0 for self-contained encodings); `meta` is encoding-specific (struct-packed).
Each stream is stored raw (codec 0) or as one zstd frame with its content size (codec 1), so the
decoder can allocate exactly and never guesses sizes.
"""

from __future__ import annotations

import struct
import threading
from dataclasses import dataclass

import zstandard

from inhabit.errors import ChecksumMismatch

MAGIC = b"IWB1"
_HEAD = struct.Struct("<4sBQQQH")
_STREAM = struct.Struct("<BQ")
RAW, ZSTD = 0, 1


class CorruptBlob(ChecksumMismatch):
    """A blob's framing is unreadable (truncated, wrong magic, a zstd frame that fails to decode)."""


@dataclass
class Blob:
    """A parsed blob: header fields plus its streams, already decompressed."""

    encoding: int
    n_elements: int
    checksum: int
    base_checksum: int
    meta: bytes
    streams: list[bytes]


def pack(
    encoding: int,
    n_elements: int,
    checksum: int,
    base_checksum: int,
    meta: bytes,
    streams: list[tuple[int, bytes]],
) -> bytes:
    """Serialize a blob; `streams` are (codec, payload) pairs as `compress_stream` returns them."""
    parts = [
        _HEAD.pack(MAGIC, encoding, n_elements, checksum, base_checksum, len(meta)),
        meta,
        bytes([len(streams)]),
    ]
    parts += [_STREAM.pack(codec, len(payload)) for codec, payload in streams]
    parts += [payload for _, payload in streams]
    return b"".join(parts)


def header(data: bytes | memoryview) -> tuple[int, int, int]:
    """(encoding, n_elements, checksum) from a blob's fixed header."""
    try:
        magic, encoding, n_elements, checksum, _, _ = _HEAD.unpack_from(data, 0)
    except struct.error:
        raise CorruptBlob("blob is shorter than its header") from None
    if magic != MAGIC:
        raise CorruptBlob(f"not a weight blob (magic {bytes(magic)!r})")
    return encoding, n_elements, checksum


def unpack(data: bytes | memoryview) -> Blob:
    """Parse and decompress a blob; raises CorruptBlob if its framing does not hold together."""
    view = memoryview(data)
    try:
        magic, encoding, n_elements, checksum, base_checksum, meta_len = _HEAD.unpack_from(view, 0)
        if magic != MAGIC:
            raise CorruptBlob(f"not a weight blob (magic {bytes(magic)!r})")
        offset = _HEAD.size
        meta = bytes(view[offset : offset + meta_len])
        offset += meta_len
        n_streams = view[offset]
        offset += 1
        heads = [_STREAM.unpack_from(view, offset + i * _STREAM.size) for i in range(n_streams)]
        offset += n_streams * _STREAM.size
        streams = []
        for codec, length in heads:
            payload = view[offset : offset + length]
            if len(payload) != length:
                raise CorruptBlob("blob is truncated")
            offset += length
            streams.append(_decompress(codec, payload))
    except (struct.error, IndexError) as e:
        raise CorruptBlob(f"blob is truncated or malformed: {e}") from None
    return Blob(encoding, n_elements, checksum, base_checksum, meta, streams)


def _decompress(codec: int, payload: memoryview) -> bytes:
    if codec == RAW:
        return bytes(payload)
    if codec != ZSTD:
        raise CorruptBlob(f"unknown stream codec {codec}")
    try:
        return _dctx().decompress(payload)
    except zstandard.ZstdError as e:
        raise CorruptBlob(f"zstd stream does not decode: {e}") from None


_LOCAL = threading.local()


def _dctx() -> zstandard.ZstdDecompressor:
    # zstd contexts are not safe to use from two threads at once; one per thread is.
    ctx = getattr(_LOCAL, "dctx", None)
    if ctx is None:
        ctx = _LOCAL.dctx = zstandard.ZstdDecompressor()
    return ctx


def cctx(level: int, min_match: int = 0, threads: int = 0) -> zstandard.ZstdCompressor:
    """A per-thread zstd compressor; min_match 7 favours literal-heavy data, threads > 0 makes
    zstd split one big input across that many workers (the output is an ordinary frame)."""
    cache = getattr(_LOCAL, "cctx", None)
    if cache is None:
        cache = _LOCAL.cctx = {}
    key = (level, min_match, threads)
    ctx = cache.get(key)
    if ctx is None:
        params = zstandard.ZstdCompressionParameters.from_level(
            level, min_match=min_match or 0, threads=threads
        )
        ctx = zstandard.ZstdCompressor(compression_params=params)
        cache[key] = ctx
    return ctx


def compress_stream(data: bytes | memoryview, cctx: zstandard.ZstdCompressor | None) -> tuple[int, bytes]:
    """Compress one stream; keep it raw when empty, when cctx is None, or when zstd does not pay."""
    raw = bytes(data)
    if cctx is None or not raw:
        return RAW, raw
    packed = cctx.compress(raw)
    if len(packed) >= len(raw):
        return RAW, raw
    return ZSTD, packed


def require(condition: bool, message: str) -> None:
    """Raise CorruptBlob unless `condition`: for inconsistencies found while decoding."""
    if not condition:
        raise CorruptBlob(message)
