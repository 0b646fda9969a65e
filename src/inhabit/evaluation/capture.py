"""Capture what a rollout changed, for the shaped reward parts (lint delta, diff size, judges),
without touching the harness: a provider wrapper hands `run_rollout` sandboxes whose `close()`
first records the workspace's changes against the task's original workspace.

Only sandboxes created from the task's workspace folder are captured (the agent's); the copies
grading creates from snapshots pass through untouched. Protects nothing: it only reads files.
"""

from __future__ import annotations

from pathlib import Path

from inhabit.rewards.compose import Changes, workspace_changes
from inhabit.sandbox.base import (
    ExecCall,
    ExecResult,
    FileEntry,
    Sandbox,
    SandboxInfo,
    SandboxLimits,
    SandboxProvider,
    create_sandbox,
)

__all__ = ["CapturingProvider"]


class _CapturingSandbox(Sandbox):
    def __init__(self, inner: Sandbox, original: Path, owner: CapturingProvider) -> None:
        self.inner, self.original, self.owner = inner, original, owner
        self.sandbox_id = inner.sandbox_id
        self._closed = False

    async def run_exec(self, call: ExecCall) -> ExecResult:
        return await self.inner.run_exec(call)

    async def read_file(self, path: str) -> bytes:
        return await self.inner.read_file(path)

    async def write_file(self, path: str, data: bytes | str) -> None:
        await self.inner.write_file(path, data)

    async def delete_file(self, path: str) -> None:
        await self.inner.delete_file(path)

    async def list_files(self, path: str = ".", *, recursive: bool = True) -> list[FileEntry]:
        return await self.inner.list_files(path, recursive=recursive)

    async def snapshot(self) -> str:
        return await self.inner.snapshot()

    async def restore(self, snapshot_id: str) -> None:
        await self.inner.restore(snapshot_id)

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.owner.changes = await workspace_changes(self.original, self.inner)
            except Exception as e:  # a sandbox that died: the shaped parts will be missing
                self.owner.error = f"{type(e).__name__}: {e}"
        await self.inner.close()

    @property
    def info(self) -> SandboxInfo:
        return self.inner.info


class CapturingProvider(SandboxProvider):
    """Wraps `inner` for ONE rollout of the task whose workspace is `workspace`; after the rollout,
    `changes` holds what the agent changed (None if nothing was captured, `error` says why)."""

    def __init__(self, inner: SandboxProvider, workspace: Path) -> None:
        self.inner, self.workspace = inner, Path(workspace).resolve()
        self.changes: Changes | None = None
        self.error: str | None = None

    async def create(
        self, source: str | Path, *, limits: SandboxLimits | None = None, env: str | Path | None = None
    ) -> Sandbox:
        sandbox = await create_sandbox(self.inner, source, limits=limits, env=env)
        if isinstance(source, Path) and source.resolve() == self.workspace:
            return _CapturingSandbox(sandbox, self.workspace, self)
        return sandbox

    async def close(self) -> None:
        """Leaves the shared inner provider open: its owner closes it."""
