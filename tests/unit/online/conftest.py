"""Fixtures for the online tests: a tiny dense model folder (the project tokenizer) and helpers."""

from __future__ import annotations

import socket
import time

import httpx
import pytest


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory):
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    path = tmp_path_factory.mktemp("models") / "dense-1m"
    return save_model_folder(build_tiny_model("dense-1m", vocab_size=len(tok), seed=0), tok, path)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc, timeout_s: float = 120.0) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"server exited: {proc.stderr.read() if proc.stderr else ''}")
        try:
            return httpx.get(f"{url}/health", timeout=2).json()
        except httpx.HTTPError:
            time.sleep(0.2)
    raise AssertionError("server did not come up")
