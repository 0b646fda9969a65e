"""The env server when clients die, stay alive for long, or the server stops mid-request.

A real server on 127.0.0.1 (in a thread) over the process backend, except the idmapped-view test,
which uses bwrap as root. Each test failed on the code before its fix: an exec outlived its
killed client by its whole run time, idle sandboxes of a live client were reaped after the idle
TTL, stopping answered a plain-text 500, and idmapped views outlived their last sandbox.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import make_provider
from inhabit.sandbox.remote import EnvServerLost, RemoteSandboxProvider
from inhabit.sandbox.server import BackgroundServer, EnvServerConfig

TOKEN = "faults-test-token-1"
SRC = Path(__file__).resolve().parents[3] / "src"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _server(**config) -> BackgroundServer:
    cfg = EnvServerConfig(token=TOKEN, backend="process", **config)
    return BackgroundServer(lambda: make_provider("process"), token=TOKEN, config=cfg)


async def _eventually(check, timeout_s: float = 30) -> None:
    """Poll `check()` until true (an upper bound against hangs, not a timing claim)."""
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.05)


CLIENT = """
import asyncio, sys
from inhabit.sandbox.remote import RemoteSandboxProvider
async def main():
    prov = RemoteSandboxProvider(sys.argv[1], sys.argv[2])
    sb = await prov.create(sys.argv[3])
    await sb.exec("echo $$ > " + sys.argv[4] + "; exec sleep 60", timeout_s=300)
asyncio.run(main())
"""


async def test_a_killed_clients_exec_is_killed_and_its_sandbox_reaped(workspace, tmp_path):
    pid_file = tmp_path / "pid"
    with _server(lease_s=1.0, reap_interval_s=0.1) as srv:
        env = os.environ | {"PYTHONPATH": str(SRC)}
        client = subprocess.Popen(
            [sys.executable, "-c", CLIENT, srv.url, TOKEN, str(workspace), str(pid_file)], env=env
        )
        try:
            deadline = time.monotonic() + 60
            while not (pid_file.exists() and pid_file.read_text().strip()):
                assert client.poll() is None and time.monotonic() < deadline, "the client never ran its exec"
                time.sleep(0.05)
            pid = int(pid_file.read_text())
            assert _alive(pid)
            client.send_signal(signal.SIGKILL)  # no close, no goodbye: the connection just drops
        finally:
            client.kill()
            client.wait()
        watcher = RemoteSandboxProvider(srv.url, TOKEN)

        async def exec_killed() -> bool:
            return not _alive(pid)

        async def sandbox_reaped() -> bool:
            return await watcher.list_sandboxes() == []

        await _eventually(exec_killed)  # before the fix: the 60 s sleep ran to its end
        await _eventually(sandbox_reaped)  # before the fix: the 900 s idle TTL
        await watcher.close()


async def test_a_live_client_keeps_its_idle_sandbox_past_the_lease(workspace):
    # Leases of 2 s leave a busy machine over a second of slack for each heartbeat (every 2/3 s).
    with _server(lease_s=2.0, idle_ttl_s=2.0, reap_interval_s=0.1) as srv:
        prov = RemoteSandboxProvider(srv.url, TOKEN)
        sb = await prov.create(workspace)
        await asyncio.sleep(6.5)  # three leases without a request: only heartbeats
        assert (await sb.exec("echo alive")).stdout == "alive\n"
        await prov.close()


async def test_stopping_answers_an_exec_in_flight_with_503_shutting_down(workspace):
    srv = _server().start()
    prov = RemoteSandboxProvider(srv.url, TOKEN)
    try:
        sb = await prov.create(workspace)
        running = asyncio.create_task(sb.exec("sleep 30", timeout_s=60))

        async def started() -> bool:
            return any(s.active_requests for s in await prov.list_sandboxes())

        await _eventually(started)
        stopper = asyncio.create_task(asyncio.to_thread(srv.stop))
        with pytest.raises(EnvServerLost, match="shutting down"):
            await asyncio.wait_for(running, 30)
        await stopper
        assert prov.losses == 1
    finally:
        srv.stop()
        await prov.close()


def test_an_idmapped_view_is_released_with_its_last_sandbox(workspace):
    from inhabit.sandbox import mounts

    prov = make_provider("bwrap")
    if prov.owner is None:
        pytest.skip("idmapped views are made only when running as root with setpriv")

    async def go() -> None:
        a = await prov.create(workspace)
        b = await prov.create(workspace)
        assert len(prov._idmapped) == 1
        await a.close()
        assert len(prov._idmapped) == 1  # b still stands on it
        snap = await b.snapshot()
        await b.close()
        assert len(prov._idmapped) == 1  # the snapshot still layers over it
        prov.drop_snapshot(snap)
        assert prov._idmapped == {} and mounts.mounts_under(prov.root / "idmap") == []

    try:
        asyncio.run(go())
    finally:
        asyncio.run(prov.close())
