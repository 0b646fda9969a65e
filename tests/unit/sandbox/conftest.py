"""Fixtures for sandbox tests: a tiny workspace on disk and real providers of each backend."""

from __future__ import annotations

from pathlib import Path

import pytest

from inhabit.sandbox import SandboxLimits

# bwrap-supervised: every exec through the sandbox's supervisor, the first one included (by
# default a sandbox's first exec takes its own bwrap; see inhabit.sandbox.supervisor).
BACKENDS = ["process", "bwrap", "bwrap-copy", "bwrap-supervised"]


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    (ws / "pkg").mkdir(parents=True)
    (ws / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (ws / "pkg" / "__init__.py").write_text("")
    (ws / "pkg" / "data.txt").write_text("hello\n")
    (ws / "link_in").symlink_to("pkg/data.txt")
    return ws


def small_limits(**kw) -> SandboxLimits:
    base = dict(memory_mb=512, max_processes=64, default_timeout_s=20.0, output_bytes=64 * 1024)
    base.update(kw)
    return SandboxLimits(**base)


def make_provider(kind: str, limits: SandboxLimits | None = None):
    limits = limits or small_limits()
    if kind == "process":
        from inhabit.sandbox.process import ProcessSandboxProvider

        return ProcessSandboxProvider(limits=limits)
    from inhabit.sandbox import bwrap

    problem = bwrap.bwrap_problem()
    if problem:
        pytest.skip(f"bwrap unavailable here: {problem}")
    mode = "copy" if kind == "bwrap-copy" else "auto"
    after = 0 if kind == "bwrap-supervised" else 1
    return bwrap.BwrapSandboxProvider(limits=limits, workspace_mode=mode, supervise_after=after)


@pytest.fixture
def provider_factory():
    """`provider_factory(kind, **limits)`: a provider of that kind with small limits (closed for you)."""
    made = []

    def factory(kind: str, **limits):
        prov = make_provider(kind, small_limits(**limits))
        made.append(prov)
        return prov

    yield factory

    for prov in made:
        prov._cleanup_sync()


@pytest.fixture(params=BACKENDS)
async def provider(request):
    if request.param != "process":
        pytest.importorskip("inhabit.sandbox.bwrap")
    prov = make_provider(request.param)
    yield prov
    await prov.close()
