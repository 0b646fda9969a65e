"""The embedded engine's dtype when the config says `auto`: bf16 where the hardware computes it natively
and the model is big enough for it to pay, fp32 otherwise.

bf16 halves the bytes a decode step reads (weights and KV cache), and CPUs with AVX512-BF16 or AMX
run bf16 matmuls natively (on a 2-core Xeon with AVX512-BF16: 406 GFLOP/s bf16 against 168 fp32);
without those instructions oneDNN converts to fp32 around every GEMM and bf16 is slower. Models
under `BF16_MIN_PARAMETERS` stay fp32: their decode step is Python and kernel-launch bound (bf16
buys little), and an RL run's trainer computes in fp32, so an fp32 engine keeps the behaviour
logprobs within rounding of the trainer's recomputation. Deterministic mode stays fp32 because
`trainer.deterministic_dtype`, whose recomputation must match the engine bit for bit, defaults to
fp32. An explicit `engine.dtype` always wins.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BF16_MIN_PARAMETERS = 50_000_000
"""Below this many parameters `auto` keeps fp32 (see module docstring)."""

_CPU_BF16_FLAGS = {"avx512_bf16": "AVX512-BF16", "amx_bf16": "AMX-BF16"}


@dataclass(frozen=True)
class DtypeChoice:
    """The dtype the engine runs in, and why (shown in `inhabit serve`'s start-up line and `model info`)."""

    name: str
    reason: str

    def describe(self) -> str:
        return f"{self.name} ({self.reason})"


@functools.cache
def cpu_bf16_instructions(cpuinfo: str = "/proc/cpuinfo") -> tuple[str, ...]:
    """The native bf16 instruction sets this CPU reports (Linux `/proc/cpuinfo` flags); () if none or unknown."""
    try:
        text = Path(cpuinfo).read_text()
    except OSError:
        return ()
    for line in text.splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            return tuple(name for flag, name in _CPU_BF16_FLAGS.items() if flag in flags)
    return ()


def native_bf16(device: str) -> str | None:
    """What computes bf16 natively on `device` (e.g. 'AVX512-BF16, AMX-BF16'), or None."""
    import torch

    kind = torch.device(device).type
    if kind == "cuda":
        return "CUDA bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else None
    if kind == "cpu":
        found = cpu_bf16_instructions()
        return ", ".join(found) if found else None
    return None


def choose_dtype(setting: str, *, device: str, parameters: int, deterministic: bool = False) -> DtypeChoice:
    """Resolve `engine.dtype` (`auto` or an explicit dtype) for a model of `parameters` parameters."""
    if setting != "auto":
        return DtypeChoice(setting, "set in the config")
    if deterministic:
        return DtypeChoice("float32", "auto: deterministic mode matches the trainer's fp32 recomputation")
    millions = f"{parameters / 1e6:.0f}M parameters"
    if parameters < BF16_MIN_PARAMETERS:
        return DtypeChoice("float32", f"auto: {millions}, under {BF16_MIN_PARAMETERS // 10**6}M")
    hardware = native_bf16(device)
    if hardware is None:
        return DtypeChoice("float32", f"auto: no native bf16 on {device}")
    return DtypeChoice("bfloat16", f"auto: {hardware}, {millions}")


def model_parameters(model: Any) -> int:
    """Parameters of a loaded model (shared tensors, such as tied embeddings, once)."""
    return sum(p.numel() for p in model.parameters())


def folder_parameters(path: str | Path) -> int:
    """Parameters stored in a model folder's safetensors files, read from their headers (no weights
    load); 0 when there are none or they cannot be read (loading the folder then says why)."""
    from safetensors import SafetensorError, safe_open

    total = 0
    try:
        for file in sorted(Path(path).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open is no mapping)
                    n = 1
                    for dim in f.get_slice(key).get_shape():
                        n *= dim
                    total += n
    except (OSError, SafetensorError):
        return 0
    return total
