"""bwrap starts in the provider's launch namespace (root): a short table that still sees every
sandbox's mounts, and without it (or once it is gone) sandboxes start as before."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.unit.sandbox.conftest import small_limits

from inhabit.sandbox import mounts
from inhabit.sandbox.bwrap import BwrapSandboxProvider, bwrap_problem, can_mount

pytestmark = [
    pytest.mark.skipif(bwrap_problem() is not None, reason="bwrap does not work on this host"),
    pytest.mark.skipif(not can_mount(), reason="the launch namespace needs root"),
]


def _table(pid: int) -> str:
    return Path(f"/proc/{pid}/mountinfo").read_text()


async def test_the_launch_namespace_sees_sandbox_mounts_and_nothing_else_new(
    provider_factory, workspace, tmp_path
):
    prov = provider_factory("bwrap")
    assert prov.launch_ns is not None
    pid = prov.launch_ns.pid
    # A mount another program makes on the host after the provider started stays out of it.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    mounts.mount_tmpfs(elsewhere, 1 << 20)
    try:
        sb = await prov.create(workspace)
        table = _table(pid)
        assert str(elsewhere) not in table
        # The sandbox's volume and overlay, mounted on the host after the namespace was made,
        # are there (bwrap binds them), and bwrap starts from this table.
        assert f"{sb._volume.path} " in table and f"{sb.workspace} " in table
        assert len(table.splitlines()) < len(Path("/proc/self/mountinfo").read_text().splitlines())
        r = await sb.exec("cat calc.py && echo ok > out.txt")
        assert r.ok and "def add" in r.stdout, r
        assert await sb.read_file("out.txt") == b"ok\n"
        volume = sb._volume.path
        await sb.close()
        assert f"{volume} " not in _table(pid)  # unmounting reaches it too
    finally:
        mounts.umount(elsewhere)


async def test_sandboxes_start_without_it_and_after_it_is_gone(workspace):
    off = BwrapSandboxProvider(limits=small_limits(), launch_namespace=False)
    on = BwrapSandboxProvider(limits=small_limits())
    try:
        assert off.launch_ns is None and off.launch_prefix() == off.drop_privileges
        async with await off.create(workspace) as sb:
            assert (await sb.exec("true")).ok
        assert on.launch_ns is not None
        on.launch_ns.close()  # its holder killed: the next launch starts from the host's table
        async with await on.create(workspace) as sb:
            assert (await sb.exec("true")).ok
        assert on.launch_ns is None
    finally:
        off._cleanup_sync()
        on._cleanup_sync()


async def test_close_ends_the_holder_and_unmounts_the_scratch_tree(workspace):
    prov = BwrapSandboxProvider(limits=small_limits())
    assert prov.launch_ns is not None
    pid, root = prov.launch_ns.pid, prov.root
    await prov.close()
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()
    assert f" {root} " not in Path("/proc/self/mountinfo").read_text()
