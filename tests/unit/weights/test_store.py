"""The store and publisher: atomic versions, chains, manifests, retention (local and memory backends)."""

from __future__ import annotations

import json

import pytest

from inhabit.errors import ChecksumMismatch, WeightsError
from inhabit.weights.publish import Publisher, PublisherConfig
from inhabit.weights.store import Store, VersionNotFound


def test_versions_chains_and_manifests(any_store_url, versions):
    store = Store(any_store_url)
    pub = Publisher(store, PublisherConfig(full_every=3, shard_bytes=40_000, keep_chains=None))
    manifests = [pub.publish(state) for state in versions[:7]]
    assert store.versions() == list(range(7)) and store.latest() == 6
    assert [m.kind for m in manifests] == ["full", "delta", "delta", "full", "delta", "delta", "full"]
    assert [m.parent for m in manifests] == [None, 0, 1, None, 3, 4, None]
    assert [[m.version for m in chain] for chain in store.chains()] == [[0, 1, 2], [3, 4, 5], [6]]
    m = store.manifest(4)
    assert len(m.shards) > 1, "small shard_bytes must split a version into several shards"
    assert m.encoded_bytes < m.raw_bytes / 3, "a delta of one AdamW step must be much smaller than the state"
    assert {t.name for t in m.tensors} == set(versions[0])


def test_versions_only_grow(store_url, versions):
    pub = Publisher(store_url)
    pub.publish(versions[0], version=5)
    with pytest.raises(WeightsError, match="not newer"):
        pub.publish(versions[1], version=5)
    assert pub.publish(versions[1]).version == 6


def test_corrupt_manifest_is_detected(tmp_path, versions):
    store = Store(str(tmp_path / "s"))
    Publisher(store).publish(versions[0])
    path = tmp_path / "s" / "v000000000000" / "manifest.json"
    body = json.loads(path.read_text())
    body["tensors"][0]["shape"] = [1, 2, 3]
    path.write_text(json.dumps(body))
    with pytest.raises(ChecksumMismatch, match="checksum"):
        store.manifest(0)
    with pytest.raises(VersionNotFound):
        store.manifest(1)


def test_gc_keeps_newest_chains_and_leased_ones(any_store_url, versions):
    store = Store(any_store_url)
    pub = Publisher(store, PublisherConfig(full_every=2, keep_chains=None))
    for state in versions[:8]:  # chains [0,1] [2,3] [4,5] [6,7]
        pub.publish(state)
    store.lease("gen-a", 1)
    store.lease("gen-b", 4, ttl_s=-1)  # expired: protects nothing
    deleted = store.gc(keep_chains=1)
    assert deleted == [2, 3, 4, 5]
    assert store.versions() == [0, 1, 6, 7]
    store.release("gen-a")
    assert store.gc(keep_chains=1) == [0, 1]
    with pytest.raises(WeightsError):
        store.gc(keep_chains=0)


def test_publisher_runs_gc_after_each_snapshot(store_url, versions):
    store = Store(store_url)
    pub = Publisher(store, PublisherConfig(full_every=2, keep_chains=2))
    for state in versions[:7]:
        pub.publish(state)
    assert store.versions() == [4, 5, 6]  # chains [4,5] and [6]; [0,1] and [2,3] collected


def test_shape_change_forces_a_full_snapshot(store_url, versions):
    pub = Publisher(store_url, PublisherConfig(full_every=100))
    pub.publish(versions[0])
    changed = dict(versions[1])
    changed["extra.bias"] = versions[1]["model.norm.weight"][:7].clone()
    assert pub.publish(changed).kind == "full"
    assert pub.publish(changed).kind == "delta"
    assert pub.publish(changed, full=True).kind == "full"


def test_verify_follows_parent_links_and_reports_missing_ones(tmp_path, versions):
    from inhabit.weights.verify import verify_store

    store = Store(str(tmp_path / "s"))
    pub = Publisher(store, PublisherConfig(full_every=100))
    pub.publish(versions[0], version=0)
    pub.publish(versions[1], version=5)  # versions need not be contiguous
    pub.publish(versions[2], version=9)
    assert verify_store(store) == ([], 3)
    store.delete(5)
    problems, _ = verify_store(store)
    assert problems == [(9, "parent version 5 (chain from snapshot 0) is missing")]
