"""The env server's registry reaper: a client heard from while a sweep closes other sandboxes keeps
the rest of its own (expiry is checked again just before each close)."""

from __future__ import annotations

import asyncio

from conftest import make_provider
from inhabit.sandbox.server import EnvServerConfig
from inhabit.sandbox.server_registry import SandboxRegistry


async def test_a_client_heard_from_during_a_sweep_keeps_its_sandboxes(workspace, tmp_path):
    config = EnvServerConfig(token="t" * 32, backend="process", lease_s=5.0)
    reg = SandboxRegistry(make_provider("process"), config, tmp_path / "spool")
    ids = [await reg.create(workspace, None, None, client="a") for _ in range(3)]
    for entry in reg.entries.values():
        entry.last_used -= 60  # silent for longer than the lease
    reg.clients["a"] -= 60

    async def speak_after_first_close():
        while len(reg.entries) == len(ids):
            await asyncio.sleep(0)
        reg.heard_from("a")  # a heartbeat arriving while the sweep is under way

    speaker = asyncio.create_task(speak_after_first_close())
    try:
        reaped = await reg.reap()
    finally:
        await asyncio.wait_for(speaker, timeout=30)
    assert len(reaped) == 1 and reaped[0] in ids
    assert sorted(reg.entries) == sorted(set(ids) - set(reaped))
    assert "a" in reg.clients
    await reg.close_all()
    assert reg.entries == {}
