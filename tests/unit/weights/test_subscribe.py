"""Subscribers: follow the newest version, catch up after missed versions, resume cut downloads."""

from __future__ import annotations

import fsspec
import pytest
from fsspec.implementations.local import LocalFileSystem

from inhabit.weights.publish import Publisher, PublisherConfig
from inhabit.weights.store import Store
from inhabit.weights.subscribe import Subscriber, SubscriberConfig

from .conftest import assert_same_weights


def test_follows_newest_version_bit_exact(any_store_url, versions, tmp_path):
    pub = Publisher(any_store_url, PublisherConfig(full_every=4))
    sub = Subscriber(any_store_url, SubscriberConfig(name="gen-0", cache_dir=str(tmp_path / "cache")))
    for v, state in enumerate(versions[:6]):
        pub.publish(state)
        result = sub.sync()
        assert result.reached and result.version == v
        assert_same_weights(sub.state_dict(), state)
        if v in (1, 2, 3, 5):  # inside a chain: exactly one delta replayed, only changed tensors listed
            assert result.replayed == [v] and result.changed
    assert sub.sync().replayed == []  # nothing new


def test_subscriber_that_missed_five_versions_catches_up(any_store_url, versions):
    store = Store(any_store_url)
    pub = Publisher(store, PublisherConfig(full_every=10))
    sub = Subscriber(store)
    pub.publish(versions[0])
    pub.publish(versions[1])
    assert sub.sync().version == 1
    for state in versions[2:7]:  # five versions the subscriber never saw
        pub.publish(state)
    result = sub.sync()
    assert result.reached and result.version == 6
    assert result.replayed == [2, 3, 4, 5, 6], "missed versions replay as deltas, no snapshot refetch"
    assert_same_weights(sub.state_dict(), versions[6])


def test_subscriber_on_an_older_chain_jumps_to_the_newest_snapshot(store_url, versions):
    pub = Publisher(store_url, PublisherConfig(full_every=3))
    sub = Subscriber(store_url)
    pub.publish(versions[0])
    sub.sync()
    for state in versions[1:8]:
        pub.publish(state)
    result = sub.sync()
    assert result.replayed == [6, 7] and result.changed is None
    assert_same_weights(sub.state_dict(), versions[7])


def test_sync_to_an_older_version(store_url, versions):
    pub = Publisher(store_url, PublisherConfig(full_every=3))
    for state in versions[:6]:
        pub.publish(state)
    sub = Subscriber(store_url)
    assert sub.sync(4).replayed == [3, 4]
    assert_same_weights(sub.state_dict(), versions[4])


class CountingFS(LocalFileSystem):
    """A real local filesystem that counts shard reads and can drop the connection after N of them."""

    def __init__(self, fail_after: int | None = None, **kw):
        super().__init__(**kw)
        self.reads: list[str] = []
        self.fail_after = fail_after

    def cat_file(self, path, start=None, end=None, **kw):
        if "shard-" in str(path):
            if self.fail_after is not None and len(self.reads) >= self.fail_after:
                raise ConnectionResetError("connection dropped mid-download (test)")
            self.reads.append(str(path).rsplit("/", 2)[-2] + "/" + str(path).rsplit("/", 1)[-1])
        return super().cat_file(path, start=start, end=end, **kw)


def test_cut_download_resumes_without_refetching_finished_shards(tmp_path, versions):
    root = str(tmp_path / "store")
    pub = Publisher(root, PublisherConfig(shard_bytes=100_000))
    manifest = pub.publish(versions[0])
    n_shards = len(manifest.shards)
    assert n_shards >= 6
    cache = str(tmp_path / "cache")

    cut = CountingFS(fail_after=3, skip_instance_cache=True)
    sub = Subscriber(Store(root, fs=cut), SubscriberConfig(cache_dir=cache, workers=1))
    with pytest.raises(ConnectionResetError):
        sub.sync()
    assert sub.version is None and len(cut.reads) == 3

    # A new process (new subscriber), same cache: only the shards not yet fetched are read.
    resumed = CountingFS(skip_instance_cache=True)
    sub2 = Subscriber(Store(root, fs=resumed), SubscriberConfig(cache_dir=cache, workers=4))
    result = sub2.sync()
    assert result.reached and result.stats.cached_shards == 3
    assert sorted(resumed.reads + cut.reads) == sorted(f"v000000000000/{s.file}" for s in manifest.shards)
    assert_same_weights(sub2.state_dict(), versions[0])


def test_memory_filesystem_is_a_real_backend(versions):
    url = "memory://weights-memory-backend"
    fs = fsspec.filesystem("memory")
    pub = Publisher(url)
    pub.publish(versions[0])
    assert fs.exists("/weights-memory-backend/v000000000000/manifest.json")
    sub = Subscriber(url)
    assert sub.sync().reached
