"""bwrap backend specifics: the view inside, layer lifetimes, mounts and cgroups cleaned up."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from inhabit.errors import SandboxError, SandboxNotFound
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.sandbox.bwrap import BwrapSandboxProvider, bwrap_problem

pytestmark = pytest.mark.skipif(bwrap_problem() is not None, reason="bwrap does not work on this host")


def _mounts_under(root: Path) -> int:
    """Sandbox mounts (volumes, overlays) under a provider's root; its shared views not counted."""
    return sum(f"{root}/sb/" in line for line in Path("/proc/self/mountinfo").read_text().splitlines())


async def test_auto_picks_bwrap_here():
    prov = create_provider(SandboxConfig())
    try:
        assert isinstance(prov, BwrapSandboxProvider)
    finally:
        await prov.close()


async def test_inside_view_user_tools_and_no_leaked_fds(provider_factory, workspace):
    prov = provider_factory("bwrap")
    async with await prov.create(workspace) as sb:
        r = await sb.exec(
            "id -u; hostname; ls /proc/self/fd | wc -l; python3 -c 'import sys; print(sys.prefix)'; ruff --version"
        )
        uid, host, nfds, prefix, ruff = r.stdout.splitlines()
        assert (uid, host) == ("1000", "devbox")
        assert int(nfds) <= 4  # 0, 1, 2 and the fd `ls` opens: nothing of ours leaks in
        # The venv: at the machine profile's place as root (pyview), else at its host path.
        assert prefix in (prov.machine.venv_dir, str(Path(sys.prefix).resolve()))
        assert ruff.startswith("ruff ")
        # Files the host API writes are the sandbox user's to edit, and the reverse.
        await sb.write_file("from_host.txt", "a")
        assert (await sb.exec("echo b >> from_host.txt && echo c > from_inside.txt")).ok
        assert await sb.read_file("from_host.txt") == b"ab\n"
        await sb.write_file("from_inside.txt", "d")


async def test_snapshot_layers_outlive_their_sandbox_until_dropped(provider_factory, workspace):
    prov = provider_factory("bwrap")
    if not prov.overlay:
        pytest.skip("overlay mode needs root")
    before = _mounts_under(prov.root)
    sb = await prov.create(workspace)
    await sb.write_file("v.txt", "1")
    snap = await sb.snapshot()
    volume = sb._volume.path
    await sb.close()
    assert volume.exists()  # the snapshot's layer lives there
    async with await prov.create(snap) as child:
        assert await child.read_file("v.txt") == b"1"
        await child.write_file("v.txt", "2")
        snap2 = await child.snapshot()
    prov.drop_snapshot(snap)
    assert volume.exists()  # snap2 stacks on snap's layer: still needed
    async with await prov.create(snap2) as grandchild:
        assert await grandchild.read_file("v.txt") == b"2"
    prov.drop_snapshot(snap2)
    assert not volume.exists()
    assert _mounts_under(prov.root) == before


async def test_close_removes_mounts_and_cgroups(provider_factory, workspace):
    prov = provider_factory("bwrap")
    before = _mounts_under(prov.root)
    sb = await prov.create(workspace)
    await sb.exec("echo hi > /tmp/x")
    groups = list(sb._groups)
    await sb.close()
    assert _mounts_under(prov.root) == before
    assert not any(g.exists() for g in groups)
    await prov.close()
    assert not prov.root.exists()


async def test_failed_launch_is_an_error_not_a_result(provider_factory, workspace):
    prov = provider_factory("bwrap")
    if prov.cgroups is None:
        pytest.skip("needs cgroups")
    async with await prov.create(workspace) as sb:
        prov.cgroups.remove(sb._groups)  # the sandbox's cgroups vanish under it
        with pytest.raises(SandboxError):
            await sb.exec("true")


async def test_close_racing_a_snapshot_leaves_nothing(provider_factory, workspace):
    prov = provider_factory("bwrap")
    before = _mounts_under(prov.root)
    for _ in range(5):
        sb = await prov.create(workspace)
        await sb.write_file("x.txt", "1")
        results = await asyncio.gather(sb.snapshot(), sb.close(), return_exceptions=True)
        assert results[1] is None
        assert isinstance(results[0], str | SandboxNotFound), results
    for snap_id in list(prov._snapshots):
        prov.drop_snapshot(snap_id)
    assert _mounts_under(prov.root) == before
    assert not list((prov.root / "sb").iterdir())


async def test_idmapped_source_views_are_bounded(provider_factory, tmp_path, monkeypatch):
    from inhabit.sandbox import bwrap

    prov = provider_factory("bwrap")
    if prov.owner is None:
        pytest.skip("idmapped views are made only when running as root")
    monkeypatch.setattr(bwrap, "_MAX_VIEWS", 2)
    kept = []
    for i in range(5):
        src = tmp_path / f"src{i}"
        src.mkdir()
        (src / "f.txt").write_text(str(i))
        sb = await prov.create(src)
        assert (await sb.exec("cat f.txt && echo x >> f.txt")).stdout == str(i)
        if i == 0:
            kept.append(sb)  # in use: must survive eviction
        else:
            await sb.close()
    views = [
        line
        for line in Path("/proc/self/mountinfo").read_text().splitlines()
        if f"{prov.root}/idmap/" in line
    ]
    assert len(views) <= 3  # the bound plus the one still in use
    assert (await kept[0].exec("cat f.txt")).stdout == "0x\n"
    await kept[0].close()


def test_remove_tree_never_changes_the_mode_of_the_tree_parent(tmp_path):
    """A tree whose top cannot be removed (a mount still on a subdir) leaves its parent's mode
    alone: a 0700 on /dev/shm (the parent of every provider's scratch dir) once locked the
    sandbox uid out of every later sandbox on the machine."""
    from inhabit.sandbox import hostfs, mounts
    from inhabit.sandbox.bwrap import can_mount

    if not can_mount():
        pytest.skip("needs root (mount)")
    parent = tmp_path / "parent"
    parent.mkdir(mode=0o1777)
    parent.chmod(0o1777)
    busy = parent / "tree" / "busy"
    busy.mkdir(parents=True)
    mounts.mount_tmpfs(busy, 1 << 20)
    try:
        hostfs.remove_tree(parent / "tree")  # rmdir(busy) fails (EBUSY), so does rmdir(tree)
        assert (parent / "tree").exists()
        assert parent.stat().st_mode & 0o7777 == 0o1777
    finally:
        mounts.umount(busy)
    hostfs.remove_tree(parent / "tree")
    assert not (parent / "tree").exists()


async def test_scratch_dir_the_sandbox_uid_cannot_reach_is_a_clear_error(tmp_path):
    import os

    if os.geteuid() != 0:
        pytest.skip("the sandbox uid is only used when started as root")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)
    try:
        prov = create_provider(SandboxConfig(backend="bwrap", scratch_dir=str(locked)))
    except SandboxError as e:
        assert "no search bit" in str(e) and str(locked) in str(e)
        return
    await prov.close()
    assert prov.owner is None, "sandboxes run as a non-root uid, yet the blocked scratch dir was accepted"


def test_remove_tree_of_a_tree_another_sweep_is_removing_does_not_raise(tmp_path):
    """Two removals of one tree at once (two providers sweeping a dead run's scratch dirs): an
    entry the other removal took first makes rmtree report os.open or os.lstat, which the retry
    must not call as if it were a removal (it raised TypeError and crashed the provider's start).
    A race: without the fix this failed in 2 of 3 runs here."""
    import threading

    from inhabit.sandbox import hostfs

    tree = tmp_path / "tree"
    for i in range(600):
        (tree / f"d{i}" / "sub").mkdir(parents=True)
        (tree / f"d{i}" / "sub" / "f").write_text("x")
    errors: list[BaseException] = []

    def remove() -> None:
        try:
            hostfs.remove_tree(tree)
        except BaseException as e:  # collected: a thread's exception would otherwise be lost
            errors.append(e)

    threads = [threading.Thread(target=remove) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    hostfs.remove_tree(tree)
    assert not tree.exists()
