"""Faults: a publisher killed mid-write, corrupt deltas in the store or the cache, a bad held state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from inhabit.weights.publish import Publisher, PublisherConfig
from inhabit.weights.store import Store
from inhabit.weights.subscribe import Subscriber, SubscriberConfig

from .conftest import assert_same_weights

SRC = str(Path(__file__).resolve().parents[3] / "src")


def _flip_byte(path: Path, offset: int | None = None) -> None:
    data = bytearray(path.read_bytes())
    i = len(data) // 2 if offset is None else offset
    data[i] ^= 0x01
    path.write_bytes(bytes(data))


def test_exception_between_shards_and_manifest_leaves_no_visible_version(any_store_url, versions):
    store = Store(any_store_url)
    pub = Publisher(store, PublisherConfig(shard_bytes=50_000))
    pub.publish(versions[0])
    sub = Subscriber(store)
    sub.sync()

    class Boom(RuntimeError):
        pass

    def commit_fails(manifest):
        raise Boom("publisher died after writing shards")

    real_commit = store.commit
    store.commit = commit_fails  # shards are written, the manifest never is
    with pytest.raises(Boom):
        pub.publish(versions[1])
    store.commit = real_commit
    assert store.fs.exists(store.shard_path(1, "shard-00000.bin")), "the shards were written"
    assert store.versions() == [0] and store.latest() == 0
    assert sub.sync().replayed == [], "subscribers see no partial version"
    # A fresh publisher (the trainer restarted) publishes version 1 over the leftovers.
    pub2 = Publisher(store)
    assert pub2.publish(versions[2], version=1).kind == "full"
    assert sub.sync().version == 1
    assert_same_weights(sub.state_dict(), versions[2])


def test_publisher_killed_by_sigkill_mid_write_leaves_no_partial_version(tmp_path, versions):
    root = tmp_path / "store"
    torch.save(versions[:2], tmp_path / "states.pt")
    script = textwrap.dedent(
        f"""
        import sys, time, torch
        sys.path.insert(0, {SRC!r})
        from inhabit.weights.publish import Publisher, PublisherConfig
        from inhabit.weights.store import Store
        states = torch.load({str(tmp_path / "states.pt")!r})
        store = Store({str(root)!r})
        pub = Publisher(store, PublisherConfig(shard_bytes=50_000, workers=1))
        pub.publish(states[0])
        real = store.write_shard
        def slow_write(version, file, data):
            real(version, file, data)
            print("wrote", version, file, flush=True)
            time.sleep(30)  # killed here, between shards and manifest
        store.write_shard = slow_write
        pub.publish(states[1])
        print("finished", flush=True)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("wrote 1 "), line
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    store = Store(str(root))
    assert (root / "v000000000001").is_dir() and not (root / "v000000000001" / "manifest.json").exists()
    assert store.versions() == [0] and store.latest() == 0
    sub = Subscriber(store)
    assert sub.sync().version == 0
    assert_same_weights(sub.state_dict(), versions[0])
    # The leftovers go once a newer version lands.
    Publisher(store).publish(versions[2], version=2)
    store.gc()
    assert not (root / "v000000000001").exists()


def test_flipped_byte_in_stored_delta_is_detected_and_healed_by_next_snapshot(tmp_path, versions):
    root = tmp_path / "store"
    pub = Publisher(str(root), PublisherConfig(full_every=4))
    for state in versions[:2]:
        pub.publish(state)
    sub = Subscriber(str(root), SubscriberConfig(cache_dir=str(tmp_path / "cache"), retries=1))
    assert sub.sync().version == 1
    for state in versions[2:4]:
        pub.publish(state)
    _flip_byte(root / "v000000000002" / "shard-00000.bin")

    result = sub.sync()  # wants 3, through the corrupt delta 2
    assert not result.reached and "checksum" in result.error
    assert sub.version == 1, "held weights stay on the last good version"
    assert_same_weights(sub.state_dict(), versions[1])
    assert result.stats.retried_shards == 2, "the corrupt shard was fetched again before giving up"
    assert sub.sync().stats.fetched_shards == 0, "a known-bad version is not fetched over and over"

    for state in versions[4:6]:  # version 4 is the next full snapshot
        pub.publish(state)
    result = sub.sync()
    assert result.reached and result.replayed == [4, 5]
    assert_same_weights(sub.state_dict(), versions[5])


def test_flipped_byte_in_cached_delta_is_refetched(tmp_path, versions):
    root = tmp_path / "store"
    cache = tmp_path / "cache"
    pub = Publisher(str(root), PublisherConfig(full_every=10))
    for state in versions[:3]:
        pub.publish(state)
    # A first pull fills the cache for version 2, then dies before applying it (simulated by
    # fetching only); the cached copy rots on disk.
    sub = Subscriber(str(root), SubscriberConfig(cache_dir=str(cache)))
    assert sub.sync(1).version == 1
    sub.fetcher.fetch(Store(str(root)).manifest(2))
    _flip_byte(cache / "v000000000002" / "shard-00000.bin")
    result = sub.sync(2)
    assert result.reached and result.stats.fetched_shards == 1 and result.stats.cached_shards == 0
    assert_same_weights(sub.state_dict(), versions[2])


def test_corrupt_held_weights_are_rebuilt_from_the_full_snapshot(store_url, versions):
    pub = Publisher(store_url, PublisherConfig(full_every=10))
    for state in versions[:3]:
        pub.publish(state)
    sub = Subscriber(store_url)
    assert sub.sync(2).version == 2
    # Memory corruption on the inference machine: one weight's bits change.
    name = "model.layers.0.mlp.up_proj.weight"
    sub.state[name].bits[123] ^= np.uint16(0x0100)
    pub.publish(versions[3])
    pub.publish(versions[4])
    result = sub.sync()
    assert result.reached and result.version == 4
    assert result.replayed[-5:] == [0, 1, 2, 3, 4], "replayed from the full snapshot"
    assert_same_weights(sub.state_dict(), versions[4])
