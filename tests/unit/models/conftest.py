"""Fixtures for model tests (copy them freely): the default tokenizer and tiny model folders.

Everything is session-scoped and built in a temp dir, so the suite never writes to the user's
cache and never downloads anything: the tokenizer is trained (about 2 s), the models are random
init from presets (`dense-1m`, `moe-2m`, seed 0). Tests that change weights must load their own
copy with `load_model(folder)` rather than mutate a shared model.
"""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def inhabit_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temp stand-in for `$INHABIT_CACHE_DIR` (set it with monkeypatch for CLI tests)."""
    return tmp_path_factory.mktemp("inhabit-cache")


@pytest.fixture(scope="session")
def tokenizer_cache_dir(inhabit_cache_dir: Path) -> Path:
    """Where `default_tokenizer()` caches when `$INHABIT_CACHE_DIR` is `inhabit_cache_dir`."""
    return inhabit_cache_dir / "tokenizers"


@pytest.fixture(scope="session")
def default_tok(tokenizer_cache_dir: Path):
    """The project's default tokenizer (4096 entries), trained once per session into a temp cache."""
    from inhabit.models.tokenizer import default_tokenizer

    return default_tokenizer(cache_dir=tokenizer_cache_dir)


def _build(tmp_path_factory: pytest.TempPathFactory, tok, preset: str) -> Path:
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    out = tmp_path_factory.mktemp(preset)
    save_model_folder(build_tiny_model(preset, vocab_size=len(tok), seed=0), tok, out)
    return out


@pytest.fixture(scope="session")
def tiny_dense_dir(tmp_path_factory: pytest.TempPathFactory, default_tok) -> Path:
    """A `dense-1m` Hugging Face folder (Qwen3ForCausalLM, seed 0)."""
    return _build(tmp_path_factory, default_tok, "dense-1m")


@pytest.fixture(scope="session")
def tiny_moe_dir(tmp_path_factory: pytest.TempPathFactory, default_tok) -> Path:
    """A `moe-2m` Hugging Face folder (Qwen3MoeForCausalLM, 8 experts, top-2, seed 0)."""
    return _build(tmp_path_factory, default_tok, "moe-2m")


@pytest.fixture
def moe_model(tiny_moe_dir: Path):
    """A fresh fp32 copy of the tiny MoE model (safe to modify)."""
    from inhabit.models.loading import load_model

    model, _ = load_model(tiny_moe_dir)
    return model
