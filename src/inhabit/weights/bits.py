"""Bit patterns of tensors: the dtypes the weight codec supports and how to view them as integers.

The codec never does floating-point arithmetic on weights: it works on the raw bit patterns,
viewed as unsigned integers of the same width, so every value (NaN payloads, infinities, -0.0,
subnormals) survives bit for bit. This module maps dtype names (torch's spelling, e.g.
"bfloat16") to their width and, for floating types, to where the exponent sits, which the codec
uses as context (the decoder knows the old exponent, and how much a weight moves in ulps depends
on it). torch is imported lazily: the codec itself needs only numpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np

from inhabit.errors import WeightsError

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class DtypeInfo:
    """How one dtype is laid out: width in bytes and, for floats, the exponent field."""

    name: str
    itemsize: int
    mantissa_bits: int | None = None
    """Bits below the exponent (None for integer types: no exponent context)."""
    exponent_bits: int = 0

    @cached_property  # on the decode hot path: parse the dtype string once
    def uint(self) -> np.dtype:
        """The unsigned integer dtype of the same width (the view the codec works on)."""
        return np.dtype(f"<u{self.itemsize}")

    @cached_property
    def sint(self) -> np.dtype:
        return np.dtype(f"<i{self.itemsize}")


DTYPES: dict[str, DtypeInfo] = {
    info.name: info
    for info in (
        DtypeInfo("bfloat16", 2, 7, 8),
        DtypeInfo("float16", 2, 10, 5),
        DtypeInfo("float32", 4, 23, 8),
        DtypeInfo("float64", 8, 52, 11),
        DtypeInfo("float8_e4m3fn", 1, 3, 4),
        DtypeInfo("float8_e5m2", 1, 2, 5),
        DtypeInfo("int8", 1),
        DtypeInfo("uint8", 1),
        DtypeInfo("int16", 2),
        DtypeInfo("uint16", 2),
        DtypeInfo("int32", 4),
        DtypeInfo("uint32", 4),
        DtypeInfo("int64", 8),
        DtypeInfo("uint64", 8),
        DtypeInfo("bool", 1),
    )
}

# numpy dtype -> our name, for arrays that come in as numpy (bf16 never does: numpy lacks it).
_NUMPY_NAMES = {
    "float16": "float16",
    "float32": "float32",
    "float64": "float64",
    "int8": "int8",
    "uint8": "uint8",
    "int16": "int16",
    "uint16": "uint16",
    "int32": "int32",
    "uint32": "uint32",
    "int64": "int64",
    "uint64": "uint64",
    "bool": "bool",
}


def dtype_info(name: str) -> DtypeInfo:
    """The layout of dtype `name`; raises WeightsError naming the supported ones otherwise."""
    try:
        return DTYPES[name]
    except KeyError:
        raise WeightsError(
            f"dtype {name!r} is not supported by the weight codec; supported: {', '.join(DTYPES)}"
        ) from None


def exponent_key(bits: np.ndarray, info: DtypeInfo) -> np.ndarray | None:
    """The exponent field of each float bit pattern as uint16 (None for integer dtypes)."""
    if info.mantissa_bits is None:
        return None
    mask = (1 << info.exponent_bits) - 1
    return ((bits >> info.mantissa_bits) & mask).astype(np.uint16)


def torch_dtype_name(dtype: torch.dtype) -> str:
    """'torch.bfloat16' -> 'bfloat16' (checked against the supported set)."""
    name = str(dtype).removeprefix("torch.")
    dtype_info(name)
    return name


def tensor_to_bits(tensor: torch.Tensor) -> tuple[np.ndarray, str, tuple[int, ...]]:
    """A torch tensor as (flat unsigned bit-pattern array, dtype name, shape), copying only if needed."""
    import torch

    name = torch_dtype_name(tensor.dtype)
    info = DTYPES[name]
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    int_dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[info.itemsize]
    if flat.dtype != int_dtype:
        flat = flat.view(int_dtype)
    return flat.numpy().view(info.uint), name, tuple(tensor.shape)


def bits_to_tensor(bits: np.ndarray, name: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The inverse of `tensor_to_bits`; shares memory with `bits`."""
    import torch

    info = dtype_info(name)
    int_dtype = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[info.itemsize]
    flat = torch.from_numpy(np.ascontiguousarray(bits).view(info.sint if info.itemsize > 1 else np.uint8))
    if flat.dtype != int_dtype:
        flat = flat.view(int_dtype)
    target = getattr(torch, name)
    out = flat if target == int_dtype else flat.view(target)
    return out.reshape(shape)


def array_to_bits(array: Any) -> tuple[np.ndarray, str, tuple[int, ...]]:
    """A numpy array (any supported numpy dtype) as (flat bit patterns, dtype name, shape)."""
    arr = np.ascontiguousarray(array)
    name = _NUMPY_NAMES.get(arr.dtype.name)
    if name is None:
        raise WeightsError(
            f"numpy dtype {arr.dtype} is not supported; pass a torch tensor for bfloat16/float8"
        )
    info = DTYPES[name]
    return arr.reshape(-1).view(info.uint), name, tuple(arr.shape)
