"""`run_capped` follows a child the same way through a pidfd and through asyncio's subprocess
transport (where pidfds are missing): output, stdin, exit status, caps, timeout and cancellation."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from inhabit.sandbox import runner
from inhabit.sandbox.runner import run_capped

PATHS = [
    pytest.param(
        True,
        id="pidfd",
        marks=pytest.mark.skipif(not runner._pidfd_works(), reason="no pidfd_open here"),
    ),
    pytest.param(False, id="transport"),
]


@pytest.fixture(params=PATHS)
def path(request, monkeypatch):
    monkeypatch.setattr(runner, "_pidfd_works", lambda: request.param)
    return request.param


def _run(argv, **kw):
    base = dict(env={"PATH": "/usr/bin:/bin"}, cwd="/", timeout_s=20.0, output_bytes=1 << 20)
    return run_capped(argv, **(base | kw))


async def test_output_stdin_and_status(path):
    data = os.urandom(3 << 20).hex().encode()[: 3 << 20]  # far more than a pipe holds
    r = await _run(["sh", "-c", "wc -c; echo err >&2; exit 3"], stdin=data)
    assert r.exit_code == 3 and r.stdout.strip() == str(len(data)) and r.stderr == "err\n"
    assert [fd for fd, _ in r.output_order] == [1, 2]
    r = await _run(["sh", "-c", "kill -TERM $$"])
    assert r.exit_code == -signal.SIGTERM
    r = await _run(["sh", "-c", "exec 0<&-; echo closed"], stdin=b"x" * (1 << 20))  # stdin refused
    assert r.ok and r.stdout == "closed\n"


async def test_output_past_the_cap_is_dropped(path):
    r = await _run(["sh", "-c", "head -c 100000 /dev/zero; echo done >&2"], output_bytes=1000)
    assert len(r.stdout) == 1000 and r.stdout_truncated and r.stderr == "done\n"


def _alive_in_group(pgid: int) -> list[int]:
    """Processes of group `pgid` that are not zombies (orphans wait for their reaper)."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid and fields[0] != "Z":
                alive.append(int(entry))
    return alive


async def test_a_timeout_kills_the_group_and_its_pipe_holders(path):
    started: list[int] = []
    r = await _run(["sh", "-c", "sleep 30 & sleep 30"], timeout_s=0.5, on_start=started.append)
    assert r.timed_out
    for _ in range(500):  # SIGKILLed: gone as soon as the kernel has torn them down
        if not _alive_in_group(started[0]):
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError(f"still running: {_alive_in_group(started[0])}")


async def test_cancellation_kills_the_child(path):
    started: list[int] = []
    task = asyncio.create_task(_run(["sleep", "30"], on_start=started.append))
    while not started:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    for _ in range(500):  # reaped by the loop once it has died
        try:
            os.kill(started[0], 0)
        except ProcessLookupError:
            break
        await asyncio.sleep(0.01)
    else:
        raise AssertionError("the cancelled command is still running")


async def test_a_program_that_does_not_exist_is_a_sandbox_error(path):
    from inhabit.errors import SandboxError

    with pytest.raises(SandboxError, match="could not start"):
        await _run(["/nonexistent/program"])
