"""The subscriber: an inference machine's side of weight sync.

    sub = Subscriber("http://trainer:8470", SubscriberConfig(name="gen-0", cache_dir="/tmp/w"))
    await sub.follow(engine)            # forever: newest version -> engine.load_weights

`sync(target)` brings the held weights to `target` (default: the newest version):

- if the held version is in the target's chain, it replays the deltas after it (a subscriber
  that missed versions just replays more of them); otherwise it starts from the chain's full
  snapshot and replays from there;
- shards come through `ShardFetcher` (parallel, verified, cached, resumable);
- deltas are applied in place, touching only changed elements, and every tensor is verified
  against its checksum. If the held weights turn out not to be the base a delta expects, they
  are dropped and rebuilt from the full snapshot. If a version in the store is corrupt or gone,
  the subscriber stops at the newest version it can reconstruct and says so in the result; it
  never hands out unverified weights, and the next full snapshot heals it.

Held tensors are handed to the engine without copying; `InferenceEngine.load_weights` copies
them into the model before it returns (the embedded engine does), which is what makes the next
in-place update safe.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from pydantic import Field

from inhabit.config import Config
from inhabit.errors import ChecksumMismatch, WeightsError
from inhabit.log import get_logger
from inhabit.weights import codec
from inhabit.weights.bits import bits_to_tensor
from inhabit.weights.fetch import CorruptShard, FetchStats, ShardFetcher
from inhabit.weights.manifest import Manifest, ShardEntry, TensorEntry
from inhabit.weights.store import Store, VersionNotFound

if TYPE_CHECKING:
    import torch

    from inhabit.inference.engine import InferenceEngine

log = get_logger(__name__)


class SubscriberConfig(Config):
    """How a subscriber fetches and follows."""

    name: str = Field("subscriber", description="Lease name in the store (letters, digits, _ . -).")
    cache_dir: str | None = Field(None, description="Where fetched shards are kept so downloads resume.")
    workers: int = Field(8, ge=1, le=256, description="Parallel shard downloads (and decode threads).")
    retries: int = Field(2, ge=0, le=20, description="Extra fetches of a shard that fails its checksum.")
    lease_ttl_s: float = Field(3600.0, gt=0, description="How long a lease protects a version from gc.")
    poll_interval_s: float = Field(2.0, gt=0, description="Seconds between checks for a newer version.")


@dataclass
class Held:
    """One held tensor: flat bit patterns plus how to view them."""

    bits: np.ndarray
    dtype: str
    shape: tuple[int, ...]


@dataclass
class SyncResult:
    """What one `sync` did."""

    start: int | None
    """Version held before."""
    version: int | None
    """Version held afterwards."""
    target: int | None
    replayed: list[int] = field(default_factory=list)
    """Versions applied, in order (a full snapshot first when the chain was restarted)."""
    changed: set[str] | None = field(default_factory=set)
    """Tensors that differ from before the sync (None: all of them, e.g. after a snapshot)."""
    stats: FetchStats = field(default_factory=FetchStats)
    error: str | None = None
    """Why the target was not reached (None when it was)."""

    @property
    def reached(self) -> bool:
        return self.error is None and self.version == self.target


class Subscriber:
    """Holds one version's weights and brings them up to date from a store."""

    def __init__(self, store: Store | str, config: SubscriberConfig | None = None) -> None:
        self.store = store if isinstance(store, Store) else Store(store)
        self.config = config or SubscriberConfig()
        self.fetcher = ShardFetcher(
            self.store, self.config.cache_dir, workers=self.config.workers, retries=self.config.retries
        )
        self.version: int | None = None
        self.state: dict[str, Held] = {}
        self.bad_versions: set[int] = set()
        self._lease_warned = False
        self.on_manifest: Callable[[Manifest], None] | None = None
        """Called with each manifest about to be fetched (progress bars)."""
        self.on_shard: Callable[[ShardEntry], None] | None = None
        """Called from a download thread after each shard is fetched and verified."""

    # ------------------------------------------------------------------ views

    def state_dict(self, names: set[str] | None = None) -> dict[str, torch.Tensor]:
        """Held weights as torch tensors sharing memory with the held buffers (all, or `names`)."""
        return {
            name: bits_to_tensor(h.bits, h.dtype, h.shape)
            for name, h in self.state.items()
            if names is None or name in names
        }

    # ------------------------------------------------------------------ sync

    def sync(self, target: int | None = None) -> SyncResult:
        """Bring the held weights to `target` (default newest); see the module docstring."""
        latest = self.store.latest()
        target = latest if target is None else target
        result = SyncResult(start=self.version, version=self.version, target=target)
        if target is None or target == self.version:
            return result
        self._lease(target)
        before = dataclasses.replace(self.fetcher.totals)
        try:
            try:
                self._replay(self._plan(target), result)
            except _HeldStateInvalid as e:
                # Intact delta, wrong base: the held weights were not what we thought. Start over
                # from the chain's full snapshot and replay (this raises if the store is broken).
                log.warning("%s; rebuilding from the full snapshot", e)
                self._replay(self._plan(target), result)
        except (ChecksumMismatch, VersionNotFound) as e:
            # A version in the store is corrupt or gone. Replay stops before applying it, so the
            # held weights are the newest reachable ones (bad - 1 when it was in this chain).
            bad = getattr(e, "version", None)
            if bad is not None:
                self.bad_versions.add(bad)
            result.error = str(e)
            log.warning("could not reach version %s (holding %s): %s", target, self.version, e)
        result.version = self.version
        result.stats = self.fetcher.totals.minus(before)
        if self.version is not None:
            self._lease(self.version)
            self.fetcher.prune({self.version})
        return result

    def _plan(self, target: int) -> list[Manifest]:
        """Manifests to apply, oldest first: deltas after the held version, or a full snapshot + deltas."""
        path: list[Manifest] = []
        v: int | None = target
        while v is not None:
            manifest = self._manifest(v)
            path.append(manifest)
            if manifest.kind == "full" or manifest.parent == self.version:
                break
            v = manifest.parent
        path.reverse()
        if path[0].kind == "delta" and path[0].parent != self.version:
            raise WeightsError(f"version {target}'s chain does not start with a full snapshot")
        return path

    def _manifest(self, version: int) -> Manifest:
        try:
            return self.store.manifest(version)
        except (ChecksumMismatch, VersionNotFound) as e:
            e.version = version  # type: ignore[attr-defined]
            raise

    def _replay(self, path: list[Manifest], result: SyncResult) -> None:
        for manifest in path:
            if manifest.version in self.bad_versions:
                # Found corrupt before: stop just before it instead of fetching it again.
                raise _KnownBad(
                    f"version {manifest.version} is corrupt in the store; waiting for the next full snapshot",
                    manifest.version,
                )
            if self.on_manifest is not None:
                self.on_manifest(manifest)
            shards, _ = self.fetcher.fetch(manifest, self.on_shard)
            changed = self._apply(manifest, shards)
            result.replayed.append(manifest.version)
            if changed is None:
                result.changed = None
            elif result.changed is not None:
                result.changed |= changed
            self.version = manifest.version

    def _apply(self, manifest: Manifest, shards: dict[str, bytes]) -> set[str] | None:
        """Apply one verified version to the held state; returns changed names (None: all)."""
        views = {
            t.name: memoryview(shards[t.shard])[t.offset : t.offset + t.length] for t in manifest.tensors
        }
        if manifest.kind == "full":

            def full(t: TensorEntry) -> Held:
                return Held(codec.decode(views[t.name], t.dtype), t.dtype, t.shape)

            with ThreadPoolExecutor(self.config.workers) as pool:
                held = dict(
                    zip([t.name for t in manifest.tensors], pool.map(full, manifest.tensors), strict=True)
                )
            self.state = held
            return None
        if self.version != manifest.parent or self.state.keys() != {t.name for t in manifest.tensors}:
            raise WeightsError(
                f"version {manifest.version} is a delta on {manifest.parent}, held {self.version}"
            )

        def delta(t: TensorEntry) -> None:
            h = self.state[t.name]
            if t.encoding != "same":
                codec.decode(views[t.name], t.dtype, h.bits, inplace=True)

        try:
            with ThreadPoolExecutor(self.config.workers) as pool:
                list(pool.map(delta, manifest.tensors))
        except ChecksumMismatch as e:
            # The shard was intact (its checksum passed), so the held weights are not the base
            # this delta expects: drop them; the caller restarts from a full snapshot.
            self.state, self.version = {}, None
            raise _HeldStateInvalid(str(e), manifest.version) from e
        return {t.name for t in manifest.tensors if t.encoding != "same"}

    def _lease(self, version: int) -> None:
        if self.store.read_only:  # an http store cannot take leases; gc there is its owner's call
            log.debug("%s is read-only: no lease for version %d", self.store.url, version)
            return
        try:
            self.store.lease(self.config.name, version, self.config.lease_ttl_s)
        except Exception as e:  # best effort: a read-only store (http) cannot take leases
            if not self._lease_warned:
                log.warning(
                    "cannot write leases to %s (%s); gc will not know this subscriber", self.store.url, e
                )
                self._lease_warned = True

    # ------------------------------------------------------------------ engine

    async def push(self, engine: InferenceEngine, result: SyncResult | None = None) -> None:
        """Hand the held weights to `engine` (only the changed tensors when the engine was current)."""
        if self.version is None:
            raise WeightsError("nothing to load: sync a version first")
        partial = result is not None and result.changed is not None and engine.version == result.start
        names = result.changed if partial and result is not None else None
        await engine.load_weights(self.state_dict(names), self.version)

    async def follow(
        self, engine: InferenceEngine, *, stop: asyncio.Event | None = None, max_polls: int | None = None
    ) -> None:
        """Keep `engine` on the newest version until `stop` is set (or after `max_polls` checks)."""
        polls = 0
        while (stop is None or not stop.is_set()) and (max_polls is None or polls < max_polls):
            polls += 1
            try:
                result: SyncResult | None = await asyncio.to_thread(self.sync)
            except Exception as e:  # a dropped connection, a store that is down: try again later
                log.warning(
                    "weight sync failed (%s: %s); retrying in %.1f s",
                    type(e).__name__,
                    e,
                    self.config.poll_interval_s,
                )
                result = None
            if self.version is not None and self.version != engine.version:
                await self.push(engine, result)
            if stop is not None:
                try:
                    await asyncio.wait_for(stop.wait(), self.config.poll_interval_s)
                except TimeoutError:
                    pass
            elif max_polls is None or polls < max_polls:
                await asyncio.sleep(self.config.poll_interval_s)


class _HeldStateInvalid(ChecksumMismatch):
    """A verified delta did not reproduce its checksum on the held weights: they are not its base."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


class _KnownBad(ChecksumMismatch):
    """The path to the target crosses a version already found corrupt."""

    def __init__(self, message: str, version: int) -> None:
        super().__init__(message)
        self.version = version


__all__ = ["CorruptShard", "Held", "Subscriber", "SubscriberConfig", "SyncResult"]
