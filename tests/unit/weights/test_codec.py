"""The codec reproduces every tensor bit for bit, in every representation, and detects corruption."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from inhabit.errors import ChecksumMismatch, WeightsError
from inhabit.weights import codec
from inhabit.weights.bits import DTYPES, bits_to_tensor, dtype_info, tensor_to_bits

SHAPES = st.lists(st.integers(0, 37), min_size=0, max_size=3).map(tuple)


def _random_bits(rng: np.random.Generator, name: str, n: int) -> np.ndarray:
    info = dtype_info(name)
    return rng.integers(0, 256, size=n * info.itemsize, dtype=np.uint8).view(info.uint)


def _mutate(rng: np.random.Generator, base: np.ndarray, fraction: float, small: bool) -> np.ndarray:
    """A copy of base with about `fraction` of elements changed by a few ulps or at random."""
    new = base.copy()
    idx = np.flatnonzero(rng.random(base.size) < fraction)
    if small:
        step = rng.integers(-3, 4, size=idx.size).astype(base.dtype)
        new[idx] = base[idx] + step
    else:
        new[idx] = rng.integers(0, 256, size=idx.size * base.itemsize, dtype=np.uint8).view(base.dtype)
    return new


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    name=st.sampled_from(sorted(DTYPES)),
    shape=SHAPES,
    fraction=st.sampled_from([0.0, 0.01, 0.2, 0.5, 0.9, 1.0]),
    small=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_round_trip_every_dtype_and_shape(name, shape, fraction, small, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape, dtype=np.int64))
    base = _random_bits(rng, name, n)
    new = _mutate(rng, base, fraction, small)
    full = codec.encode(new, name)
    assert np.array_equal(codec.decode(full.blob, name), new)
    delta = codec.encode(new, name, base)
    assert delta.changed == int(np.count_nonzero(new != base))
    assert np.array_equal(codec.decode(delta.blob, name, base), new)
    work = base.copy()
    out = codec.decode(delta.blob, name, work, inplace=True)
    assert out is work and np.array_equal(work, new)


def test_every_representation_is_exercised_and_exact():
    rng = np.random.default_rng(0)
    base = _random_bits(rng, "bfloat16", 200_000)
    seen = set()
    for fraction, small in [(0.0, True), (0.02, True), (0.3, True), (0.95, True), (1.0, False)]:
        new = _mutate(rng, base, fraction, small)
        enc = codec.encode(new, "bfloat16", base)
        seen.add(enc.encoding)
        assert np.array_equal(codec.decode(enc.blob, "bfloat16", base), new)
    assert {"same", "sparse", "full"} <= seen
    assert seen & {"diff", "xor"}


def test_sparse_values_use_exponent_buckets_on_large_tensors():
    # Big enough that the values are split by old exponent into several zstd frames.
    rng = np.random.default_rng(1)
    weights = torch.randn(400_000) * 0.02
    base, name, _ = tensor_to_bits(weights.to(torch.bfloat16))
    new = _mutate(rng, base, 0.2, True)
    enc = codec.encode(new, name, base)
    assert enc.encoding == "sparse"
    assert np.array_equal(codec.decode(enc.blob, name, base), new)


def test_special_float_bit_patterns_survive():
    values = torch.tensor(
        [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40, 3.0, -3.0], dtype=torch.float32
    )
    nan_payload = torch.tensor([0x7FC00001, 0x7F800001, -1], dtype=torch.int32).view(torch.float32)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        t = torch.cat([values, nan_payload]).to(dtype) if dtype == torch.float32 else values.to(dtype)
        bits, name, shape = tensor_to_bits(t)
        # Flip signs (a sign change is a huge bit-pattern difference) and swap NaN <-> inf.
        new_t = torch.flip(-t, dims=[0]).contiguous()
        new_bits, _, _ = tensor_to_bits(new_t)
        enc = codec.encode(new_bits, name, bits)
        out = codec.decode(enc.blob, name, bits)
        assert np.array_equal(out, new_bits)
        back = bits_to_tensor(out, name, shape)
        assert back.dtype == dtype
        assert np.array_equal(tensor_to_bits(back)[0], new_bits)


def test_tensor_bits_round_trip_through_torch():
    for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.int64, torch.bool, torch.int8):
        t = (torch.randn(3, 5) * 10).to(dtype)
        bits, name, shape = tensor_to_bits(t)
        back = bits_to_tensor(bits.copy(), name, shape)
        assert back.dtype == dtype and back.shape == t.shape
        assert np.array_equal(tensor_to_bits(back)[0], bits)


def test_flipped_byte_is_detected_and_inplace_base_is_restored():
    rng = np.random.default_rng(2)
    base = _random_bits(rng, "bfloat16", 50_000)
    new = _mutate(rng, base, 0.03, True)
    enc = codec.encode(new, "bfloat16", base)
    detected = 0
    for offset in range(40, len(enc.blob), max(1, len(enc.blob) // 50)):
        bad = bytearray(enc.blob)
        bad[offset] ^= 0x10
        work = base.copy()
        try:
            out = codec.decode(bytes(bad), "bfloat16", work, inplace=True)
        except ChecksumMismatch:
            detected += 1
            assert np.array_equal(work, base), "a failed in-place decode must leave the base untouched"
        else:
            # Only a flip that cannot change the result (e.g. in an unused header byte) may pass.
            assert np.array_equal(out, new)
    assert detected > 0


def test_wrong_base_is_reported_as_such():
    rng = np.random.default_rng(3)
    base = _random_bits(rng, "float32", 1000)
    new = _mutate(rng, base, 0.1, True)
    enc = codec.encode(new, "float32", base)
    other = _mutate(rng, base, 0.1, True)
    with pytest.raises(ChecksumMismatch, match="wrong base"):
        codec.decode(enc.blob, "float32", other)
    with pytest.raises(WeightsError, match="needs the base"):
        codec.decode(enc.blob, "float32")


def test_unsupported_dtype_is_a_clear_error():
    with pytest.raises(WeightsError, match="supported"):
        codec.encode(np.zeros(3, dtype=np.uint16), "complex64")


def test_multithreaded_zstd_for_big_planes_round_trips():
    rng = np.random.default_rng(4)
    big = (rng.integers(0, 4, size=9 << 20, dtype=np.uint8) * 3).astype(np.uint8)  # one 9 MiB plane
    enc = codec.encode(big, "uint8", config=codec.CodecConfig(threads=2))
    assert len(enc.blob) < big.nbytes / 2
    assert np.array_equal(codec.decode(enc.blob, "uint8"), big)
