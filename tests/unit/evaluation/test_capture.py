"""CapturingProvider: the agent's sandbox runs commands exactly as the one it wraps, and its close
records what the agent changed; the copies grading makes pass through unwrapped."""

from __future__ import annotations

import asyncio
from pathlib import Path

from inhabit.evaluation.capture import CapturingProvider
from inhabit.sandbox import SandboxConfig, create_provider


def test_the_captured_sandbox_execs_as_the_inner_one_and_records_the_change(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")

    async def go() -> None:
        inner = create_provider(SandboxConfig(backend="process"))
        provider = CapturingProvider(inner, workspace)
        try:
            sandbox = await provider.create(workspace)
            assert type(sandbox).__name__ == "_CapturingSandbox"
            out = await sandbox.exec(["sh", "-c", "cat; echo err >&2; exit 3"], stdin=b"in", env={"A": "1"})
            assert (out.exit_code, out.stdout, out.stderr) == (3, "in", "err\n")
            assert (await sandbox.exec("echo $A", env={"A": "x"})).stdout == "x\n"
            slow = await sandbox.exec("sleep 5", timeout_s=0.3)
            assert slow.timed_out
            await sandbox.write_file("calc.py", "def add(a, b):\n    return a + b\n")
            snap = await sandbox.snapshot()
            await sandbox.close()
            copy = await provider.create(snap)  # grading's fresh copy: not wrapped, not captured
            assert type(copy).__name__ != "_CapturingSandbox"
            await copy.close()
        finally:
            await inner.close()
        assert provider.error is None and provider.changes is not None
        assert provider.changes.after == {"calc.py": "def add(a, b):\n    return a + b\n"}

    asyncio.run(go())
