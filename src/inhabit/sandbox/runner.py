"""Run one child process with a wall-clock limit and capped, streamed output (shared by backends).

Output is read in chunks while the child runs (an asyncio subprocess protocol, no stream
buffers); bytes past the cap are read and dropped (so the child never blocks on a full pipe and a
flood never sits in memory whole). The exit is awaited on its own, not together with the pipes,
so a background child holding stdout open cannot stall the call past its timeout. The child starts in
its own session/process group; on timeout, cancellation or any error the whole group gets
SIGKILL, and the backend's `kill` hook (cgroup kill for bwrap) runs too.

Does not protect against: a child that leaves its process group (setsid) escaping the group
kill; backends that need stronger guarantees (bwrap) kill by pid namespace and cgroup instead.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from inhabit.errors import SandboxError
from inhabit.sandbox.base import ExecResult


class _Capture(asyncio.SubprocessProtocol):
    """Collects a child's stdout/stderr up to a cap each, dropping (but draining) the rest.

    Each stream is decoded incrementally (a character split across reads stays whole) and the
    order in which the two streams' output arrived is kept as (fd, characters) runs.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.chunks: dict[int, list[str]] = {1: [], 2: []}
        self.size = {1: 0, 2: 0}
        self.truncated = {1: False, 2: False}
        self.decoders = {fd: codecs.getincrementaldecoder("utf-8")(errors="replace") for fd in (1, 2)}
        self.order: list[list[int]] = []
        loop = asyncio.get_running_loop()
        self.exited = loop.create_future()
        self.pipes_closed = {1: loop.create_future(), 2: loop.create_future()}

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        room = self.cap - self.size[fd]
        if len(data) > room:
            data = data[: max(room, 0)]
            self.truncated[fd] = True
        if data:
            self.size[fd] += len(data)
            self._add(fd, self.decoders[fd].decode(data))

    def _add(self, fd: int, text: str) -> None:
        if not text:
            return
        self.chunks[fd].append(text)
        if self.order and self.order[-1][0] == fd:
            self.order[-1][1] += len(text)
        else:
            self.order.append([fd, len(text)])

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        fut = self.pipes_closed.get(fd)
        if fut is not None and not fut.done():
            fut.set_result(None)

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def finish(self) -> None:
        """Flush the decoders (an incomplete character at the end becomes U+FFFD)."""
        for fd, decoder in self.decoders.items():
            self._add(fd, decoder.decode(b"", final=True))

    def text(self, fd: int) -> str:
        return "".join(self.chunks[fd])


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
    loop = asyncio.get_running_loop()
    start = time.perf_counter()
    spawn = asyncio.ensure_future(
        loop.subprocess_exec(
            lambda: _Capture(output_bytes),
            *argv,
            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            preexec_fn=preexec_fn,
            pass_fds=tuple(pass_fds),
            start_new_session=True,
        )
    )
    try:
        # Shielded: a cancellation during the spawn must still find the child to kill it.
        transport, cap = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        with contextlib.suppress(BaseException):
            transport, _ = await asyncio.wait_for(spawn, 10)
            kill_group(transport.get_pid())
            if kill is not None:
                kill()
            transport.close()
        raise
    except OSError as e:
        raise SandboxError(f"could not start {argv[0]!r}: {e}") from e
    pid = transport.get_pid()
    if on_start is not None:
        on_start(pid)
    timed_out = False

    def _kill_all() -> None:
        kill_group(pid)
        if kill is not None:
            kill()

    try:
        if stdin is not None:
            w = transport.get_pipe_transport(0)
            if w is not None:
                with contextlib.suppress(OSError, RuntimeError):
                    w.write(stdin)
                    w.close()
        try:
            await asyncio.wait_for(asyncio.shield(cap.exited), timeout=timeout_s)
        except TimeoutError:
            timed_out = True
            _kill_all()
            await asyncio.wait_for(asyncio.shield(cap.exited), timeout=10)
        # Background children of the command may still hold the pipes open.
        if after_exit is not None:
            after_exit(pid)
        else:
            kill_group(pid)
        await asyncio.wait([*cap.pipes_closed.values()], timeout=2.0)
    except BaseException:
        # Cancellation or an error: nothing the command started may outlive this call.
        _kill_all()
        transport.close()
        raise
    code = transport.get_returncode()
    transport.close()
    cap.finish()
    return ExecResult(
        exit_code=code if code is not None else -signal.SIGKILL,
        stdout=cap.text(1),
        stderr=cap.text(2),
        duration_s=time.perf_counter() - start,
        timed_out=timed_out,
        stdout_truncated=cap.truncated[1],
        stderr_truncated=cap.truncated[2],
        output_order=tuple((fd, n) for fd, n in cap.order),
    )
