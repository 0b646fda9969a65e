"""Run one child process with a wall-clock limit and capped, streamed output (shared by backends).

Output is read in chunks while the child runs; bytes past the cap are read and dropped (so the
child never blocks on a full pipe and a flood never sits in memory whole). The child starts in
its own session/process group; on timeout, cancellation or any error the whole group gets
SIGKILL, and the backend's `kill` hook (cgroup kill for bwrap) runs too.

Does not protect against: a child that leaves its process group (setsid) escaping the group
kill; backends that need stronger guarantees (bwrap) kill by pid namespace and cgroup instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from inhabit.errors import SandboxError
from inhabit.sandbox.base import ExecResult

_CHUNK = 64 * 1024


class _CappedReader:
    def __init__(self, stream: asyncio.StreamReader, cap: int) -> None:
        self.stream = stream
        self.cap = cap
        self.chunks: list[bytes] = []
        self.size = 0
        self.truncated = False

    async def run(self) -> None:
        while True:
            chunk = await self.stream.read(_CHUNK)
            if not chunk:
                return
            room = self.cap - self.size
            if room <= 0:
                self.truncated = True
                continue
            if len(chunk) > room:
                chunk = chunk[:room]
                self.truncated = True
            self.chunks.append(chunk)
            self.size += len(chunk)

    def text(self) -> str:
        return b"".join(self.chunks).decode("utf-8", errors="replace")


def kill_group(pid: int) -> None:
    """SIGKILL the process group led by `pid` (no error if it is gone)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


async def run_capped(
    argv: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: str | os.PathLike[str],
    timeout_s: float,
    output_bytes: int,
    stdin: bytes | None = None,
    preexec_fn: Callable[[], Any] | None = None,
    pass_fds: Sequence[int] = (),
    kill: Callable[[], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    after_exit: Callable[[int], None] | None = None,
) -> ExecResult:
    """Run `argv`; return its exit code and capped output. Kills the group on every way out.

    `on_start(pid)` runs right after spawning; `after_exit(pid)` runs once the main process has
    exited (backends use it to kill stragglers so that pipes reach EOF).
    """
    start = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            preexec_fn=preexec_fn,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
        )
    except OSError as e:
        raise SandboxError(f"could not start {argv[0]!r}: {e}") from e
    if on_start is not None:
        on_start(proc.pid)
    assert proc.stdout is not None and proc.stderr is not None
    out = _CappedReader(proc.stdout, output_bytes)
    err = _CappedReader(proc.stderr, output_bytes)
    readers = [asyncio.ensure_future(out.run()), asyncio.ensure_future(err.run())]
    timed_out = False

    def _kill_all() -> None:
        kill_group(proc.pid)
        if kill is not None:
            kill()

    try:
        if stdin is not None and proc.stdin is not None:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), timeout=timeout_s)
        except TimeoutError:
            timed_out = True
            _kill_all()
            await proc.wait()
        # Background children of the command may still hold the pipes open.
        if after_exit is not None:
            after_exit(proc.pid)
        else:
            kill_group(proc.pid)
        _, pending = await asyncio.wait(readers, timeout=2.0)
        for task in pending:
            task.cancel()
    except BaseException:
        # Cancellation or an error: nothing the command started may outlive this call.
        _kill_all()
        for task in readers:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.shield(proc.wait())
        raise
    code = proc.returncode if proc.returncode is not None else -signal.SIGKILL
    return ExecResult(
        exit_code=code,
        stdout=out.text(),
        stderr=err.text(),
        duration_s=time.perf_counter() - start,
        timed_out=timed_out,
        stdout_truncated=out.truncated,
        stderr_truncated=err.truncated,
    )
