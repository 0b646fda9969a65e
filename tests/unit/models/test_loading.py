"""Loading local Hugging Face folders: round trips, dtypes, and clear errors for broken folders."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from inhabit.errors import ModelLoadError
from inhabit.models.loading import load_model
from inhabit.models.tiny import build_tiny_model


@pytest.mark.parametrize(("fixture", "preset"), [("tiny_dense_dir", "dense-1m"), ("tiny_moe_dir", "moe-2m")])
def test_round_trip_gives_the_same_logits(request, default_tok, fixture: str, preset: str) -> None:
    folder = request.getfixturevalue(fixture)
    model, tok = load_model(folder)
    assert not model.training
    assert next(model.parameters()).dtype == torch.float32
    assert len(tok) == len(default_tok) and tok.eos_token == default_tok.eos_token
    original = build_tiny_model(preset, vocab_size=len(default_tok), seed=0)
    ids = torch.tensor([[1, 4, 500, 501, 6, 5]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, original(ids).logits, rtol=0, atol=0)


def test_bfloat16_load(tiny_dense_dir) -> None:
    model, _ = load_model(tiny_dense_dir, dtype="bfloat16")
    assert next(model.parameters()).dtype == torch.bfloat16


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_missing_and_non_folders(tmp_path) -> None:
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(tmp_path / "nope")
    f = tmp_path / "file.bin"
    f.write_bytes(b"x")
    with pytest.raises(ModelLoadError, match="is a file"):
        load_model(f)
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(tmp_path)
    # A hub-style name is never fetched: it is just a folder that does not exist here.
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model("Qwen/Qwen3-0.6B")


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "model.safetensors").unlink(), "no weights"),
        (lambda d: [(d / n).unlink() for n in ("tokenizer.json", "tokenizer_config.json")], "no tokenizer"),
        (lambda d: (d / "config.json").write_text("{not json"), "not valid JSON"),
        (lambda d: (d / "config.json").write_text("{}"), "no model_type"),
    ],
)
def test_incomplete_folders(tmp_path, tiny_dense_dir, damage, message: str) -> None:
    folder = _copy(tiny_dense_dir, tmp_path / "m")
    damage(folder)
    with pytest.raises(ModelLoadError, match=message):
        load_model(folder)


def test_unknown_architecture(tmp_path, tiny_dense_dir) -> None:
    folder = _copy(tiny_dense_dir, tmp_path / "m")
    cfg = json.loads((folder / "config.json").read_text())
    cfg["model_type"] = "no_such_arch"
    cfg["architectures"] = ["NoSuchArchForCausalLM"]
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="no_such_arch"):
        load_model(folder)


def test_truncated_weights(tmp_path, tiny_dense_dir) -> None:
    folder = _copy(tiny_dense_dir, tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match="weights"):
        load_model(folder)


def test_bad_dtype(tiny_dense_dir) -> None:
    with pytest.raises(ModelLoadError, match="float32"):
        load_model(tiny_dense_dir, dtype="int8")
