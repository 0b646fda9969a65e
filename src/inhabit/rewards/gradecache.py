"""Grading once per distinct final workspace: a group's rollouts that end in the same files share one grading.

In RL the rollouts of one group, and of one task across steps, often end in the same workspace (a
policy that has learnt a fix writes the same fix), and grading is most of a rollout's CPU (a fresh
sandbox, a pytest run, the seal plugin: docs/results.md). `GradeCache.grade` keys a grading by the
task, the grading settings and a digest of the final workspace, and runs `grade` once per key; a
rollout whose key is already graded (or being graded) gets that result, marked `cached`.

Why a cached result cannot pay a cheat more than grading does. Grading reads the task (fixed in a
run), its settings (in the key) and the final workspace, which it copies into a fresh sandbox; the
digest covers everything of the workspace that grading acts on:
- every path and its kind, and every regular file's bytes;
- under a `__pycache__` directory, which grading always drops, a file's first 8 bytes only (the
  magic number and the flags word, whose unchecked-hash bit raises `bytecode_planted`): a
  timestamp .pyc differs between two episodes of the same code and must not split them;
- symlinks, whose targets a listing does not give: a workspace with any symlink is graded afresh,
  as is one too large to digest cheaply (`max_files`, `max_bytes`);
- the files must not change between the digest and grading's snapshot: in an isolated sandbox
  no command outlives its exec (the exec-init kills its whole subtree), so none runs then. The
  `process` backend (no isolation) lets a `setsid` child live on and rewrite the files after the
  digest, which would store the grading of other files under this key: its sandboxes are graded
  afresh, always.
A remote sandbox (an env server's) is graded afresh too: its digest would cost a request per file.
What the digest leaves out (modification times, permission bits, and fifos or device nodes, which
a workspace listing does not show) can make two episodes with the same listed files grade apart
only where code under test reads them; a cached result then gives one of them the outcome that
grading gave the other, a workspace with the same files. So no reward comes from the cache that
grading does not pay for some workspace of those files, and the best a policy can earn stays what
grading pays: the cache adds no way to cheat; it stops re-running the same grading. A grading that
failed to run (status "error") is not kept.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from typing import Any

from inhabit.sandbox.base import Sandbox, SandboxProvider
from inhabit.tasks.task import Task

__all__ = ["GradeCache", "workspace_digest"]

BYTECODE_HEADER = 8
"""Bytes of a file under `__pycache__` that grading reads (`hacks.neutralize`: magic and flags)."""


async def workspace_digest(
    sandbox: Sandbox, *, max_files: int = 4000, max_bytes: int = 64 << 20
) -> str | None:
    """A digest of `sandbox`'s workspace as grading sees it (module docstring), or None where it is
    not digested: a sandbox without isolation or on an env server, a symlink in it, more than `max_files` entries or
    `max_bytes` of files."""
    if not sandbox.info.isolated or not sandbox.files_are_local:
        return None  # not local: every file read would be a request to the env server
    entries = sorted(await sandbox.list_files("."), key=lambda e: e.path)
    if len(entries) > max_files or any(e.kind == "symlink" for e in entries):
        return None
    if sum(e.size for e in entries if e.kind == "file") > max_bytes:
        return None
    h = hashlib.sha256()
    for e in entries:
        h.update(f"{e.kind}\0{e.path}\0".encode())
        if e.kind != "file":
            continue
        data = await sandbox.read_file(e.path)
        if "__pycache__" in e.path.split("/")[:-1]:
            data = data[:BYTECODE_HEADER]
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


class GradeCache:
    """`grade` once per (task, grading settings, final workspace digest); bounded, least recently
    used first out. One per process that runs rollouts (an `EngineRunner`)."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = max_entries
        self._results: OrderedDict[str, asyncio.Future[Any]] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.uncached = 0
        """Gradings run without the cache: a sandbox without isolation, a workspace with a symlink,
        or one too large to digest."""

    async def grade(
        self, task: Task, sandbox: Sandbox, provider: SandboxProvider, *, config: Any = None
    ) -> tuple[Any, bool]:
        """(GradeResult, whether it came from the cache) for `sandbox`'s final workspace."""
        from inhabit.rewards.grading import GradingConfig, grade

        config = config or GradingConfig()
        digest = await workspace_digest(sandbox)
        if digest is None:
            self.uncached += 1
            return await grade(task, sandbox, provider, config=config), False
        key = hashlib.sha256(
            "\0".join([task.id, str(task.root), config.model_dump_json(), digest]).encode()
        ).hexdigest()
        if (known := self._results.get(key)) is not None:
            self._results.move_to_end(key)
            result = await asyncio.shield(known)
            if result is not None:
                self.hits += 1
                return result, True
        self.misses += 1
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._results[key] = future
        while len(self._results) > self.max_entries:
            self._results.popitem(last=False)
        try:
            result = await grade(task, sandbox, provider, config=config)
        except BaseException:
            future.set_result(None)  # whoever waits grades for itself
            self._results.pop(key, None)
            raise
        if result.status == "error":  # a grading that did not run is not an outcome of the files
            future.set_result(None)
            self._results.pop(key, None)
        else:
            future.set_result(result)
        return result, False

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "uncached": self.uncached}
