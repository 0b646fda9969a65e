"""Shared pytest fixtures and hooks for the whole suite.

Tests marked `gpu` are skipped unless CUDA is available; `ray` tests are skipped unless Ray is
installed. Part-specific fixtures (tiny models, temp sandboxes) live in the conftest.py of their
test folder so that collecting one part never imports another part's heavy dependencies.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

# Nothing may be fetched from a model hub at test time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return torch.cuda.is_available()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_skip = None if _cuda_available() else pytest.mark.skip(reason="needs a CUDA GPU")
    ray_skip = (
        None
        if importlib.util.find_spec("ray")
        else pytest.mark.skip(reason="needs ray (pip install -e '.[ray]')")
    )
    for item in items:
        if gpu_skip and "gpu" in item.keywords:
            item.add_marker(gpu_skip)
        if ray_skip and "ray" in item.keywords:
            item.add_marker(ray_skip)


@pytest.fixture(autouse=True)
def _wide_console(monkeypatch: pytest.MonkeyPatch) -> None:
    """CLI output must not depend on the terminal or the paths of the machine running the suite.

    rich wraps at the console width (80 columns when output is not a terminal), so a longer
    checkout or temporary path moved a wrap into the middle of asserted text. During each test,
    every rich console (in this process, or in a subprocess that inherits the environment) is
    this wide; pytest's own report, written between tests, keeps the real terminal's width."""
    monkeypatch.setenv("COLUMNS", "1000")
