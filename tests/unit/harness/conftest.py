"""Fixtures for harness tests: a real (process-backend) sandbox over a tiny repository."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from inhabit.harness.config import HarnessConfig
from inhabit.harness.tools import ToolContext
from inhabit.sandbox import SandboxConfig, SandboxLimits, create_provider

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
TEST_CALC = (
    "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_sub():\n    assert sub(5, 3) == 2\n"
)


def make_repo(root: Path) -> Path:
    (root / "tests").mkdir(parents=True)
    (root / "calc.py").write_text(CALC)
    (root / "tests" / "test_calc.py").write_text(TEST_CALC)
    (root / "tests" / "__init__.py").write_text("")
    (root / "README.md").write_text("# calc\nA calculator that adds and subtracts numbers.\n")
    return root


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo")


@pytest.fixture
async def provider():
    # process by default (works everywhere); INHABIT_HARNESS_TEST_BACKEND=bwrap runs the same tests isolated.
    backend = os.environ.get("INHABIT_HARNESS_TEST_BACKEND", "process")
    prov = create_provider(
        SandboxConfig(backend=backend, limits=SandboxLimits(memory_mb=2048, default_timeout_s=60))
    )
    yield prov
    await prov.close()


@pytest.fixture
async def sandbox(provider, repo: Path):
    sb = await provider.create(repo)
    yield sb
    await sb.close()


@pytest.fixture
def hconfig() -> HarnessConfig:
    return HarnessConfig()  # run_tests finds a pytest the sandbox can run


@pytest.fixture
def ctx(sandbox, hconfig: HarnessConfig) -> ToolContext:
    return ToolContext(sandbox=sandbox, config=hconfig, test_command=hconfig.test_command)
