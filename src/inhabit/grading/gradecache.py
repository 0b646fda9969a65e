"""Grading once per distinct final workspace of a group: rollouts that end in the same files share one grading.

A group's rollouts of one task often end in the same workspace (a policy that has learnt a fix
writes the same fix), and grading is most of a rollout's CPU (a fresh sandbox, a pytest run, the
seal plugin: docs/results.md). `GradeCache.grade` keys a grading by the task, the grading settings
and a digest of the final workspace, and runs `grade` once per key; a rollout whose key is already
graded (or being graded) gets that result, marked `cached`. The runner makes one cache per group
(`inhabit.rollouts.EngineRunner.group_grade_cache`) and drops it with the group.

Why one group and no longer. Grading is random on purpose: canaries are drawn afresh for every
grading, so code that guesses which test is real passes one grading in four or so
(`inhabit.grading.canaries`). A cache that lived across steps would keep a lucky draw for as long as
the policy writes those files, turning a 1-in-4 cheat into a sure one (and an honest fix's unlucky
timeout into a sure 0). Within a group, sharing a draw changes no rollout's expected reward: each
copy of the files still earns what one grading of them earns, on average; the copies just agree.

What the key covers. The digest is the sandbox's own (`Sandbox.workspace_digest`, for bwrap
`hostfs.tree_digest`): every entry's raw name, type and permission bits and every regular file's
bytes, read on the host while no command runs; under a `__pycache__` directory, which grading
always drops, a file directly in it counts by its first 8 bytes (the magic number and the flags word, whose
unchecked-hash bit raises `bytecode_planted`): a timestamp .pyc differs between two episodes of the
same code and must not split them. A tree that a digest could miss something of (a symlink, a fifo
or device, a hard link, an unreadable entry), or that is too large, is graded afresh, as is every
sandbox of a backend that gives no digest: the `process` backend (no isolation: a `setsid` child
outlives its exec and could rewrite the files between the digest and grading's snapshot) and an env
server's (a digest would cost a request per file). The files must be the same ones grading copies:
in an isolated sandbox no command outlives its exec, and a grading is kept only if the digest taken
after it equals the one before. A grading that failed to run (status "error") is not kept.
"""

from __future__ import annotations

import asyncio
import hashlib
from typing import TYPE_CHECKING

from inhabit.log import get_logger
from inhabit.sandbox.base import Sandbox, SandboxProvider
from inhabit.tasks.task import Task

if TYPE_CHECKING:
    from inhabit.grading.grader import GradeResult, GradingConfig

__all__ = ["GradeCache", "workspace_digest"]

log = get_logger(__name__)

BYTECODE_HEADER = 8
"""Bytes of a file under `__pycache__` that grading reads (`hacks.neutralize`: magic and flags)."""
MAX_ENTRIES = 4000
MAX_BYTES = 64 << 20


async def workspace_digest(sandbox: Sandbox) -> str | None:
    """The digest of `sandbox`'s workspace the cache keys by (module docstring), or None where there
    is none: the backend gives none, the tree has what a digest could miss, or it is too large."""
    try:
        return await sandbox.workspace_digest(
            max_entries=MAX_ENTRIES, max_bytes=MAX_BYTES, head_only={b"__pycache__": BYTECODE_HEADER}
        )
    except Exception as e:  # a digest is an optimization: grading itself decides what a tree is worth
        log.info(
            "grade cache: no digest of %s (%s: %s); grading afresh", sandbox.sandbox_id, type(e).__name__, e
        )
        return None


class GradeCache:
    """`grade` once per (task, grading settings, final workspace digest). One per group."""

    def __init__(self) -> None:
        self._results: dict[str, asyncio.Future[GradeResult | None]] = {}
        self.hits = 0
        self.misses = 0
        self.uncached = 0
        """Gradings run without the cache: no digest (module docstring)."""

    async def grade(
        self, task: Task, sandbox: Sandbox, provider: SandboxProvider, *, config: GradingConfig | None = None
    ) -> tuple[GradeResult, bool]:
        """(GradeResult, whether it came from the cache) for `sandbox`'s final workspace."""
        from inhabit.grading.grader import GradingConfig, grade

        config = config or GradingConfig()
        digest = await workspace_digest(sandbox)
        if digest is None:
            self.uncached += 1
            return await grade(task, sandbox, provider, config=config), False
        key = hashlib.sha256(
            "\0".join([task.id, str(task.root), config.model_dump_json(), digest]).encode()
        ).hexdigest()
        while (known := self._results.get(key)) is not None:
            result = await asyncio.shield(known)
            if result is not None:
                self.hits += 1
                return result, True
            # that grading was not kept (it failed, or the files moved under it): look again, and
            # grade here if no one else has begun to
        self.misses += 1
        future: asyncio.Future[GradeResult | None] = asyncio.get_running_loop().create_future()
        self._results[key] = future
        keep = False
        try:
            result = await grade(task, sandbox, provider, config=config)
            # the files graded must be the files digested: nothing may have changed them since
            keep = result.status != "error" and await workspace_digest(sandbox) == digest
        finally:
            if not keep:
                del self._results[key]
            future.set_result(result if keep else None)
        return result, False

    def stats(self) -> dict[str, int]:
        return {"hits": self.hits, "misses": self.misses, "uncached": self.uncached}
