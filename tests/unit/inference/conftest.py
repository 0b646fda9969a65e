"""Fixtures for the inference tests: the project tokenizer and tiny dense / MoE models from configs."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tokenizer():
    from inhabit.models.tokenizer import default_tokenizer

    return default_tokenizer()


@pytest.fixture
def dense_model(tokenizer):
    from inhabit.models.tiny import build_tiny_model

    return build_tiny_model("dense-1m", vocab_size=len(tokenizer), seed=0)


@pytest.fixture
def moe_model(tokenizer):
    from inhabit.models.tiny import build_tiny_model

    return build_tiny_model("moe-2m", vocab_size=len(tokenizer), seed=0)


@pytest.fixture(scope="session")
def moe_folder(tmp_path_factory, tokenizer):
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    path = tmp_path_factory.mktemp("models") / "moe-2m"
    return save_model_folder(build_tiny_model("moe-2m", vocab_size=len(tokenizer), seed=0), tokenizer, path)


@pytest.fixture(scope="session")
def moe_folder_b(tmp_path_factory, tokenizer):
    """The same architecture with other weights (seed 1): a weight update."""
    from inhabit.models.tiny import build_tiny_model, save_model_folder

    path = tmp_path_factory.mktemp("models") / "moe-2m-b"
    return save_model_folder(build_tiny_model("moe-2m", vocab_size=len(tokenizer), seed=1), tokenizer, path)


@pytest.fixture
def prompts(tokenizer):
    texts = [
        "def add(a, b):",
        "class Foo:\n    ",
        "import os\n",
        "x = [1, 2, 3]\nfor i in x:",
        "# fix the bug",
    ]
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
