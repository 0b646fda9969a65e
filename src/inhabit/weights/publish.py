"""The publisher: the trainer's side of weight sync.

    pub = Publisher("s3://bucket/run1/weights", PublisherConfig(full_every=10))
    pub.publish(model.state_dict(), version=step)

Each call casts floating tensors to the engines' dtype (bf16 by default; the fp32 master copy
stays with the trainer), encodes every tensor against the previous published version in a thread
pool, packs the blobs into shards, writes the shards and then the manifest (see store.py for why
that order makes a publish atomic). A full snapshot is written every `full_every` versions, on the
first publish of a process (it holds no previous version in memory) and whenever the set of
tensors, their shapes or dtypes change.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field

from inhabit.config import Config
from inhabit.errors import WeightsError
from inhabit.log import get_logger
from inhabit.weights import codec
from inhabit.weights.bits import DTYPES, array_to_bits, tensor_to_bits
from inhabit.weights.codec import CodecConfig
from inhabit.weights.manifest import Manifest, ShardEntry, TensorEntry, shard_checksum, tensor_checksum_hex
from inhabit.weights.store import Store

if TYPE_CHECKING:
    import torch

log = get_logger(__name__)


class PublisherConfig(Config):
    """How versions are written."""

    full_every: int = Field(10, ge=1, description="A full snapshot every this many versions (K).")
    dtype: str = Field("bfloat16", description="Dtype engines run in; floating tensors are cast to it.")
    shard_bytes: int = Field(64 << 20, ge=1, description="Target size of one shard file in bytes.")
    workers: int = Field(2, ge=1, le=256, description="Threads that encode tensors and write shards.")
    keep_chains: int | None = Field(
        3, ge=1, description="After each full snapshot, gc keeps this many newest chains (None: never gc)."
    )
    codec: CodecConfig = Field(default_factory=CodecConfig)


class Publisher:
    """Publishes successive versions of a state dict to a store (one publisher per store)."""

    def __init__(self, store: Store | str, config: PublisherConfig | None = None) -> None:
        self.store = store if isinstance(store, Store) else Store(store)
        self.config = config or PublisherConfig()
        if self.config.dtype not in DTYPES or DTYPES[self.config.dtype].mantissa_bits is None:
            raise WeightsError(
                f"publisher dtype {self.config.dtype!r} must be a floating dtype of {list(DTYPES)}"
            )
        self._prev: dict[str, tuple[np.ndarray, str, tuple[int, ...]]] | None = None
        self._prev_version: int | None = None
        self._chain: int | None = None

    def to_bits(self, state_dict: Mapping[str, Any]) -> dict[str, tuple[np.ndarray, str, tuple[int, ...]]]:
        """State dict (torch tensors or numpy arrays) as bit patterns, floats cast to the engine dtype."""
        out = {}
        for name, value in state_dict.items():
            if hasattr(value, "is_floating_point"):
                cast = _cast(value, self.config.dtype)
                bits, dtype, shape = tensor_to_bits(cast)
                shared = cast is value
            else:
                bits, dtype, shape = array_to_bits(value)
                shared = True
            # Keep a private copy: the trainer will update its tensors in place, and this is the
            # base the next delta is computed against.
            out[name] = (bits.copy() if shared else bits, dtype, shape)
        return out

    def publish(
        self, state_dict: Mapping[str, Any], version: int | None = None, *, full: bool = False
    ) -> Manifest:
        """Publish one version; returns its manifest (the version is visible once this returns).

        `full=True` forces a snapshot now, e.g. after `inhabit weights verify` found a corrupt
        delta: subscribers stuck before it jump to the new snapshot on their next sync.
        """
        t0 = time.perf_counter()
        latest = self.store.latest()
        if version is None:
            version = 0 if latest is None else latest + 1
        if latest is not None and version <= latest:
            raise WeightsError(f"version {version} is not newer than the store's latest ({latest})")
        new = self.to_bits(state_dict)
        full = full or self._needs_full(new, version)
        prev = None if full else self._prev
        assert full or prev is not None

        with ThreadPoolExecutor(self.config.workers) as pool:

            def encode(name: str) -> codec.Encoded:
                bits, dtype, _ = new[name]
                base = prev[name][0] if prev is not None else None
                return codec.encode(bits, dtype, base, self.config.codec)

            encoded = dict(zip(new, pool.map(encode, new), strict=True))
            self.store.begin(version)
            tensors, shards, payloads = self._pack(new, encoded)
            list(pool.map(lambda item: self.store.write_shard(version, *item), payloads))
        manifest = Manifest(
            version=version,
            kind="full" if full else "delta",
            parent=None if full else self._prev_version,
            chain=version if full else self._chain,
            created=time.time(),
            tensors=tuple(tensors),
            shards=tuple(shards),
            raw_bytes=int(sum(bits.nbytes for bits, _, _ in new.values())),
        )
        self.store.commit(manifest)
        self._prev, self._prev_version = new, version
        self._chain = manifest.chain
        log.info(
            "published version %d (%s, %.1f MB -> %.2f MB, %.0f ms)",
            version,
            manifest.kind,
            manifest.raw_bytes / 1e6,
            manifest.encoded_bytes / 1e6,
            1000 * (time.perf_counter() - t0),
        )
        if full and self.config.keep_chains is not None:
            self.store.gc(self.config.keep_chains)
        return manifest

    def _needs_full(self, new: dict, version: int) -> bool:
        if self._prev is None or self._chain is None or self._prev_version is None:
            return True
        if version - self._chain >= self.config.full_every:
            return True
        same_layout = self._prev.keys() == new.keys() and all(self._prev[k][1:] == new[k][1:] for k in new)
        if not same_layout:
            log.info("tensor names, shapes or dtypes changed: writing a full snapshot")
        return not same_layout

    def _pack(
        self, new: dict, encoded: dict[str, codec.Encoded]
    ) -> tuple[list[TensorEntry], list[ShardEntry], list[tuple[str, bytes]]]:
        """Lay blobs back to back into shards of about `shard_bytes`."""
        tensors: list[TensorEntry] = []
        shards: list[ShardEntry] = []
        payloads: list[tuple[str, bytes]] = []
        current: list[bytes] = []
        size = 0

        def flush() -> None:
            nonlocal current, size
            data = b"".join(current)
            file = f"shard-{len(shards):05d}.bin"
            shards.append(ShardEntry(file=file, size=len(data), checksum=shard_checksum(data)))
            payloads.append((file, data))
            current, size = [], 0

        for name, enc in encoded.items():
            if current and size + len(enc.blob) > self.config.shard_bytes:
                flush()
            _, dtype, shape = new[name]
            tensors.append(
                TensorEntry(
                    name=name,
                    dtype=dtype,
                    shape=shape,
                    encoding=enc.encoding,
                    shard=f"shard-{len(shards):05d}.bin",
                    offset=size,
                    length=len(enc.blob),
                    checksum=tensor_checksum_hex(enc.checksum),
                    changed=enc.changed,
                )
            )
            current.append(enc.blob)
            size += len(enc.blob)
        if current or not shards:
            flush()
        return tensors, shards, payloads


def _cast(tensor: torch.Tensor, dtype: str) -> torch.Tensor:
    import torch

    if tensor.is_floating_point() and str(tensor.dtype) != f"torch.{dtype}":
        return tensor.detach().to(getattr(torch, dtype))
    return tensor
