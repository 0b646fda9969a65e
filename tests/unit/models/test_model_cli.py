"""`inhabit model build / info / presets` end to end through the real CLI app."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.models.loading import load_model


def test_build_then_info(tmp_path, inhabit_cache_dir, default_tok, monkeypatch) -> None:
    monkeypatch.setenv("INHABIT_CACHE_DIR", str(inhabit_cache_dir))  # reuse the session's tokenizer
    runner = CliRunner()
    out = tmp_path / "moe"
    result = runner.invoke(app, ["model", "build", "--preset", "moe-2m", "--out", str(out), "--seed", "3"])
    assert result.exit_code == 0, result.output
    assert "moe-2m" in result.output and "active" in result.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["model_type"] == "qwen3_moe" and cfg["num_experts_per_tok"] == 2
    _, tok = load_model(out)
    assert len(tok) == len(default_tok)

    result = runner.invoke(app, ["model", "info", str(out)])
    assert result.exit_code == 0, result.output
    assert "Qwen3MoeForCausalLM" in result.output and "8 experts, top-2" in result.output
    # What the engine's `auto` dtype gives this model here: fp32 for a 2M-parameter model.
    assert "float32 (auto:" in result.output and "under 50M" in result.output
    # The build reused the cached tokenizer instead of training a second one.
    assert len(list((inhabit_cache_dir / "tokenizers").glob("bpe-*"))) == 1


def test_info_on_a_missing_folder_is_a_clean_error(tmp_path) -> None:
    result = CliRunner().invoke(app, ["model", "info", str(tmp_path / "none")])
    assert result.exit_code != 0
    assert "does not exist" in str(result.exception)


def test_presets_table() -> None:
    result = CliRunner().invoke(app, ["model", "presets"])
    assert result.exit_code == 0, result.output
    for name in ("dense-1m", "dense-100m", "moe-2m", "moe-37m"):
        assert name in result.output
