"""Fetching shards: in parallel, checksum-verified, through a local cache that makes downloads resumable.

A shard is written to the cache (temporary name, then rename) only after its bytes match the
manifest's checksum, so whatever the cache holds is complete and verified. A download that is
cut (a dead connection, a killed process) leaves the finished shards there; the next attempt
checks them against the manifest and fetches only the rest. A shard whose checksum fails (in
transit or rotted in the cache) is fetched again, up to `retries` times, before the version is
declared corrupt.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from inhabit.errors import ChecksumMismatch
from inhabit.log import get_logger
from inhabit.weights.manifest import Manifest, ShardEntry, shard_checksum
from inhabit.weights.store import Store

log = get_logger(__name__)


class CorruptShard(ChecksumMismatch):
    """A shard in the store does not match its manifest, even after re-fetching."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


@dataclass
class FetchStats:
    """What a fetch cost: shards and bytes from the store, shards served by the cache."""

    fetched_shards: int = 0
    fetched_bytes: int = 0
    cached_shards: int = 0
    retried_shards: int = 0

    def add(self, other: FetchStats) -> None:
        self.fetched_shards += other.fetched_shards
        self.fetched_bytes += other.fetched_bytes
        self.cached_shards += other.cached_shards
        self.retried_shards += other.retried_shards

    def minus(self, other: FetchStats) -> FetchStats:
        return FetchStats(
            self.fetched_shards - other.fetched_shards,
            self.fetched_bytes - other.fetched_bytes,
            self.cached_shards - other.cached_shards,
            self.retried_shards - other.retried_shards,
        )


class ShardFetcher:
    """Fetches the shards of a version from a store, through an optional cache directory."""

    def __init__(
        self, store: Store, cache_dir: str | Path | None, workers: int = 8, retries: int = 2
    ) -> None:
        self.store = store
        self.cache_dir = Path(cache_dir) if cache_dir is not None else None
        self.workers = workers
        self.retries = retries
        self.totals = FetchStats()
        """Everything fetched so far, failed fetches included (updated as shards arrive)."""
        self._lock = threading.Lock()

    def _count(self, **delta: int) -> None:
        with self._lock:
            for key, value in delta.items():
                setattr(self.totals, key, getattr(self.totals, key) + value)

    def _cache_path(self, version: int, file: str) -> Path | None:
        return None if self.cache_dir is None else self.cache_dir / f"v{version:012d}" / file

    def fetch(
        self, manifest: Manifest, on_shard: Callable[[ShardEntry], None] | None = None
    ) -> tuple[dict[str, bytes], FetchStats]:
        """All shards of a version, verified: {file: bytes} plus what it cost."""

        def one(shard: ShardEntry) -> tuple[str, bytes, FetchStats]:
            data, stats = self._one(manifest.version, shard)
            if on_shard is not None:
                on_shard(shard)
            return shard.file, data, stats

        total = FetchStats()
        out: dict[str, bytes] = {}
        with ThreadPoolExecutor(max(1, min(self.workers, len(manifest.shards)))) as pool:
            for file, data, stats in pool.map(one, manifest.shards):
                out[file] = data
                total.add(stats)
        return out, total

    def _one(self, version: int, shard: ShardEntry) -> tuple[bytes, FetchStats]:
        stats = FetchStats()
        path = self._cache_path(version, shard.file)
        if path is not None and path.exists():
            data = path.read_bytes()
            if len(data) == shard.size and shard_checksum(data) == shard.checksum:
                stats.cached_shards += 1
                self._count(cached_shards=1)
                return data, stats
            log.warning("cached shard %s is corrupt; fetching it again", path)
            path.unlink(missing_ok=True)
        for attempt in range(self.retries + 1):
            data = self.store.read_shard(version, shard.file)
            stats.fetched_shards += 1
            stats.fetched_bytes += len(data)
            self._count(fetched_shards=1, fetched_bytes=len(data))
            if len(data) == shard.size and shard_checksum(data) == shard.checksum:
                if path is not None:
                    _write_atomic(path, data)
                return data, stats
            stats.retried_shards += 1
            self._count(retried_shards=1)
            log.warning(
                "shard %s of version %d failed its checksum (attempt %d of %d)",
                shard.file,
                version,
                attempt + 1,
                self.retries + 1,
            )
        raise CorruptShard(
            f"shard {shard.file} of version {version} in {self.store.url} does not match its checksum "
            f"after {self.retries + 1} fetches: the stored copy is corrupt",
            version,
        )

    def prune(self, keep: set[int]) -> None:
        """Drop cached versions other than `keep` (finished versions need no resume data)."""
        if self.cache_dir is None or not self.cache_dir.exists():
            return
        for d in self.cache_dir.glob("v" + "[0-9]" * 12):
            if int(d.name[1:]) not in keep:
                for f in d.iterdir():
                    f.unlink(missing_ok=True)
                d.rmdir()


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
