"""The manifest of one published version: what it holds, where, and how to check it.

A version is a full snapshot (`kind="full"`, decodable alone) or a delta against its parent
(`kind="delta"`, `parent = version - 1` of the same chain). `chain` is the version of the full
snapshot the chain starts at. Every shard file has an xxh3-128 of its bytes, every tensor the
xxh3-64 of its decoded bit patterns, and the manifest an xxh3-128 of its own canonical JSON
(`checksum`), so `inhabit weights verify` can check a store end to end without decoding.
"""

from __future__ import annotations

import json
from typing import Literal

import xxhash
from pydantic import BaseModel, ConfigDict, ValidationError

from inhabit.errors import ChecksumMismatch


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TensorEntry(_Frozen):
    """One tensor: where its blob lies and what it decodes to."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    encoding: str
    shard: str
    offset: int
    length: int
    checksum: str
    """xxh3-64 (hex) of the decoded tensor's bytes."""
    changed: int
    """Elements that differ from the parent (all of them in a full snapshot)."""

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


class ShardEntry(_Frozen):
    """One shard file of a version."""

    file: str
    size: int
    checksum: str
    """xxh3-128 (hex) of the file's bytes."""


class Manifest(_Frozen):
    """Everything a subscriber needs to fetch and verify one version."""

    format: Literal[1] = 1
    version: int
    kind: Literal["full", "delta"]
    parent: int | None
    chain: int
    created: float
    tensors: tuple[TensorEntry, ...]
    shards: tuple[ShardEntry, ...]
    raw_bytes: int
    """Bytes of the decoded state (sum over tensors)."""
    checksum: str = ""

    @property
    def encoded_bytes(self) -> int:
        return sum(s.size for s in self.shards)

    def body(self) -> bytes:
        """Canonical JSON without the checksum field (what the checksum covers)."""
        return self.model_dump_json(exclude={"checksum"}).encode()

    def sealed(self) -> Manifest:
        """A copy with `checksum` set."""
        return self.model_copy(update={"checksum": shard_checksum(self.body())})

    def to_json(self) -> bytes:
        return self.sealed().model_dump_json(indent=1).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str = "manifest") -> Manifest:
        """Parse and verify a manifest; ChecksumMismatch if it is corrupt."""
        try:
            manifest = cls.model_validate(json.loads(data))
        except (ValueError, ValidationError) as e:
            raise ChecksumMismatch(f"{where} is not a valid manifest: {str(e).splitlines()[0]}") from None
        if manifest.checksum != shard_checksum(manifest.body()):
            raise ChecksumMismatch(f"{where} does not match its checksum")
        return manifest


def shard_checksum(data: bytes | memoryview) -> str:
    """xxh3-128 hex digest (shards and manifests)."""
    return xxhash.xxh3_128_hexdigest(data)


def tensor_checksum_hex(value: int) -> str:
    return f"{value:016x}"
