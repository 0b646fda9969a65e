"""The codec on real training deltas: AdamW steps on a tiny model, bf16 and fp32, bit-exact and small."""

from __future__ import annotations

import itertools

import numpy as np
import zstandard

from inhabit.weights import codec
from inhabit.weights.bits import tensor_to_bits

from .conftest import bf16_bits


def test_adamw_deltas_round_trip_and_beat_xor_zstd(versions):
    total_ours = total_anchor = 0
    for prev, new in itertools.pairwise(versions):
        old_bits, new_bits = bf16_bits(prev), bf16_bits(new)
        for name, bits in new_bits.items():
            enc = codec.encode(bits, "bfloat16", old_bits[name])
            assert np.array_equal(codec.decode(enc.blob, "bfloat16", old_bits[name]), bits), name
            total_ours += len(enc.blob)
            total_anchor += len(zstandard.ZstdCompressor(level=3).compress((bits ^ old_bits[name]).tobytes()))
    # The anchor (XOR + zstd) is what the codec exists to beat; on real deltas it must.
    assert total_ours < total_anchor


def test_fp32_master_deltas_round_trip(versions):
    for prev, new in itertools.pairwise(versions[:4]):
        for name, tensor in new.items():
            bits, dtype, _ = tensor_to_bits(tensor)
            base, _, _ = tensor_to_bits(prev[name])
            enc = codec.encode(bits, dtype, base)
            assert dtype == "float32"
            assert np.array_equal(codec.decode(enc.blob, dtype, base), bits)
