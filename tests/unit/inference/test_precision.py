"""inference/precision.py: `engine.dtype = auto` picks bf16 only with native bf16 and a model big enough."""

from __future__ import annotations

import pytest
import torch

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.precision import (
    BF16_MIN_PARAMETERS,
    choose_dtype,
    cpu_bf16_instructions,
    folder_parameters,
    model_parameters,
    native_bf16,
)


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    with_bf16 = tmp_path / "a"
    with_bf16.write_text("processor\t: 0\nflags\t\t: fpu sse avx512f avx512_bf16 amx_tile amx_bf16\n")
    without = tmp_path / "b"
    without.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n")
    assert cpu_bf16_instructions(str(with_bf16)) == ("AVX512-BF16", "AMX-BF16")
    assert cpu_bf16_instructions(str(without)) == ()
    assert cpu_bf16_instructions(str(tmp_path / "missing")) == ()


def test_auto_resolves_by_hardware_size_and_mode():
    big, small = 135_000_000, 5_000_000
    hardware = native_bf16("cpu")
    chosen = choose_dtype("auto", device="cpu", parameters=big)
    assert chosen.name == ("bfloat16" if hardware else "float32")
    if hardware:
        assert hardware in chosen.reason and "135M" in chosen.reason
    assert choose_dtype("auto", device="cpu", parameters=small).name == "float32"
    assert choose_dtype("auto", device="cpu", parameters=BF16_MIN_PARAMETERS - 1).name == "float32"
    assert choose_dtype("auto", device="cpu", parameters=big, deterministic=True).name == "float32"
    # An explicit setting always wins, whatever the hardware and size.
    for name in ("float32", "bfloat16", "float16"):
        assert choose_dtype(name, device="cpu", parameters=small).name == name
        assert choose_dtype(name, device="cpu", parameters=big, deterministic=True).name == name


def test_folder_parameters_reads_safetensors_headers(tmp_path, dense_model, tokenizer):
    from inhabit.models.tiny import save_model_folder

    folder = save_model_folder(dense_model, tokenizer, tmp_path / "m")
    assert folder_parameters(folder) == model_parameters(dense_model) > 0
    assert folder_parameters(tmp_path / "nowhere") == 0
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "model.safetensors").write_bytes(b"not a safetensors file")
    assert folder_parameters(tmp_path / "bad") == 0


async def test_engine_default_keeps_tiny_models_fp32_and_explicit_dtype_wins(dense_model, tokenizer):
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig())
    try:
        assert engine.config.dtype == "float32" and engine.dtype_choice.reason.startswith("auto")
        assert next(engine.model.parameters()).dtype == torch.float32
        assert engine._kv.keys[0].dtype == torch.float32
    finally:
        await engine.close()
    engine = EmbeddedEngine(dense_model, tokenizer, EngineConfig(dtype="bfloat16"))
    try:
        assert engine.config.dtype == "bfloat16" and engine.dtype_choice.reason == "set in the config"
        assert next(engine.model.parameters()).dtype == torch.bfloat16
        assert engine._kv.keys[0].dtype == torch.bfloat16
    finally:
        await engine.close()


@pytest.mark.parametrize("setting", ["auto", "float32"])
def test_run_config_resolves_auto_once_for_a_cluster(tmp_path, dense_model, tokenizer, setting):
    from inhabit.models.tiny import save_model_folder
    from inhabit.placement.engine_backends import RunEngineConfig

    folder = save_model_folder(dense_model, tokenizer, tmp_path / "m")
    assert RunEngineConfig(dtype=setting).dtype_for(folder) == "float32"
    assert RunEngineConfig(dtype="bfloat16").dtype_for(folder) == "bfloat16"
