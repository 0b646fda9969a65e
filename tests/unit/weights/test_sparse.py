"""The sparse decoder's two implementations (compiled loop, numpy blocks) write the same bits,
reject the same corrupt streams, and leave the target as it was when they do."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inhabit.errors import WeightsError
from inhabit.weights import blob, codec, sparse
from inhabit.weights.bits import DTYPES, dtype_info

DECODERS = [
    False,
    pytest.param(
        True,
        marks=pytest.mark.skipif(
            not sparse.COMPILED,
            reason="_sparse_kernel is not built here (pip install -e . builds it)",
        ),
    ),
]


def _delta(
    name: str,
    n: int,
    fraction: float,
    seed: int,
    *,
    far: bool = False,
    big_moves: bool = False,
    buckets: int = 3,
):
    """(base, new, parsed sparse blob) for a delta that changes about `fraction` of n elements."""
    rng = np.random.default_rng(seed)
    info = dtype_info(name)
    base = rng.integers(0, 256, size=n * info.itemsize, dtype=np.uint8).view(info.uint)
    new = base.copy()
    changed = np.flatnonzero(rng.random(n) < fraction)
    if far and changed.size:
        changed = changed[::400]  # gaps over 255: the escape stream
    step = rng.integers(-3, 4, size=changed.size)
    if big_moves:
        step[::7] = rng.integers(200, 5000, size=step[::7].size)  # values outside -127..127
    step[step == 0] = 1
    new[changed] = base[changed] + step.astype(info.sint).view(info.uint)
    pos = np.flatnonzero(new != base)
    meta, streams = sparse.encode(new, base, pos, info, 3, 3, buckets=buckets)
    data = blob.pack(1, n, codec.checksum(new), codec.checksum(base), meta, streams)
    return base, new, blob.unpack(data)


@pytest.mark.parametrize("compiled", DECODERS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(DTYPES)),
    n=st.sampled_from([1, 7, 1000, 65_537, 140_001]),  # odd sizes, one block, several blocks
    fraction=st.sampled_from([0.0, 0.001, 0.05, 0.4, 1.0]),
    far=st.booleans(),
    big_moves=st.booleans(),
    # 1-2 buckets take the compiled loop's fast runs, 3 its general path only.
    buckets=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**32 - 1),
)
def test_apply_reproduces_the_new_tensor(compiled, name, n, fraction, far, big_moves, buckets, seed):
    base, new, b = _delta(name, n, fraction, seed, far=far, big_moves=big_moves, buckets=buckets)
    target = base.copy()
    undo = sparse.apply(b, target, dtype_info(name), compiled=compiled)
    assert np.array_equal(target, new)
    assert undo.done == undo.k == int(np.count_nonzero(new != base))
    # The compiled loop takes the checksum on the way (the codec then skips its own pass).
    assert undo.checksum == (codec.checksum(new) if compiled and sparse.HASHED else None)
    sparse.revert(target, undo)
    assert np.array_equal(target, base)


@pytest.mark.skipif(not sparse.COMPILED, reason="_sparse_kernel is not built here")
def test_the_compiled_loop_gets_xxh3_from_the_xxhash_module():
    # Where the loop is built, it hashes as it writes; losing that (an xxhash build that stops
    # exporting its streaming functions) would silently add a pass over every tensor.
    assert sparse.HASHED


def test_the_bucketed_bf16_path_is_exercised():
    # The default codec splits values of big bf16 deltas into exponent buckets; both decoders see it.
    _, _, b = _delta("bfloat16", 400_000, 0.2, 0)
    k, n_buckets = sparse._META.unpack_from(b.meta, 0)
    assert n_buckets == 3 and k > 3 * sparse.MIN_BUCKET_ELEMENTS


def _corruptions(b: blob.Blob):
    """Parsed blobs whose streams were damaged in the ways a flipped byte can leave them."""
    s = b.streams
    g8 = bytearray(s[0])
    g8[len(g8) // 2] = 0  # a zero gap byte with no escape behind it
    yield "zero gap", dataclasses.replace(b, streams=[bytes(g8), *s[1:]])
    g8 = bytearray(s[0])
    g8[-1] = 255  # the last position runs past the end
    yield "position past the end", dataclasses.replace(b, streams=[bytes(g8), *s[1:]])
    g8 = bytearray(s[0])
    g8[len(g8) // 2 :] = bytes([255]) * (len(g8) - len(g8) // 2)  # positions leave the tensor midway
    yield "positions past the end midway", dataclasses.replace(b, streams=[bytes(g8), *s[1:]])
    yield "torn gap escapes", dataclasses.replace(b, streams=[s[0], s[1][:-3], *s[2:]])
    pairs = np.frombuffer(s[1], dtype="<u8").reshape(-1, 2).copy()
    yield "gap escapes out of order", dataclasses.replace(b, streams=[s[0], pairs[::-1].tobytes(), *s[2:]])
    pairs[0, 1] = 0  # an escaped gap of 0
    yield "escaped gap of 0", dataclasses.replace(b, streams=[s[0], pairs.tobytes(), *s[2:]])
    pairs[0, 1] = 2**63 + 5  # negative as int64
    yield "escaped gap too big", dataclasses.replace(b, streams=[s[0], pairs.tobytes(), *s[2:]])
    yield "short bucket", dataclasses.replace(b, streams=[*s[:2], s[2][:-1], *s[3:]])
    d8 = bytearray(s[2])
    d8[d8.index(1)] = 0x80  # a value escape marker with no escape behind it
    yield "stray value escape", dataclasses.replace(b, streams=[*s[:2], bytes(d8), *s[3:]])
    vals = np.frombuffer(s[-1], dtype="<u8").reshape(-1, 2).copy()
    vals[0, 0] = 10**9  # escape index past the changes
    yield "value escape out of range", dataclasses.replace(b, streams=[*s[:-1], vals.tobytes()])


@pytest.mark.parametrize("compiled", DECODERS)
@pytest.mark.parametrize("buckets", [1, 2])
def test_corrupt_streams_are_refused_and_the_target_restored(compiled, buckets):
    # Enough changes for two buckets when asked: the compiled loop's fast runs see the damage.
    base, new, _ = _delta("bfloat16", 300_000, 0.15, 5, big_moves=True)
    # Long runs of unchanged elements, so the gap escape stream holds several escapes.
    base[1000:5000] = new[1000:5000]
    base[20_000:24_000] = new[20_000:24_000]
    pos = np.flatnonzero(new != base)
    info = dtype_info("bfloat16")
    meta, streams = sparse.encode(new, base, pos, info, 3, 3, buckets=buckets)
    b = blob.unpack(blob.pack(1, new.size, 0, 0, meta, streams))
    assert len(b.streams[1]) >= 32 and len(b.streams[-1])
    assert sparse._META.unpack_from(b.meta, 0)[1] == buckets
    for what, bad in _corruptions(b):
        target = base.copy()
        try:
            undo = sparse.apply(bad, target, info, compiled=compiled)
        except blob.CorruptBlob:
            assert np.array_equal(target, base), f"{what}: target changed by a refused delta"
        else:
            # Both decoders check the framing and the escapes before writing; other damage (a
            # zero gap byte, a stray escape marker) the compiled loop notices on the way, while
            # numpy writes something else, which the codec's checksum refuses and reverts.
            assert what in ("zero gap", "stray value escape") and not compiled, what
            assert not np.array_equal(target, new), what
            sparse.revert(target, undo)
            assert np.array_equal(target, base), what


def test_compiled_loop_refuses_what_it_cannot_write():
    _, _, b = _delta("float32", 1000, 0.1, 1)
    info = dtype_info("float32")
    if not sparse.COMPILED:
        with pytest.raises(WeightsError, match="not built"):
            sparse.apply(b, np.zeros(1000, dtype=info.uint), info, compiled=True)
    else:
        with pytest.raises(WeightsError, match="contiguous"):
            sparse.apply(b, np.zeros(2000, dtype=info.uint)[::2], info, compiled=True)
