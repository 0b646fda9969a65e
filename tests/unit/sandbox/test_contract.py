"""The Sandbox contract, run against every local backend: exec, files, snapshots, cleanup."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from inhabit.errors import PathOutsideWorkspace, SandboxError, SandboxNotFound


async def test_exec_runs_in_workspace_and_reports(provider, workspace):
    async with await provider.create(workspace) as sb:
        r = await sb.exec("cat calc.py; echo err >&2; exit 3")
        assert r.exit_code == 3
        assert "def add" in r.stdout
        assert r.stderr == "err\n"
        assert not r.timed_out and not r.ok
        r = await sb.exec(["python3", "-c", "import sys; print(sys.stdin.read().upper())"], stdin=b"abc")
        assert r.ok and r.stdout == "ABC\n"
        r = await sb.exec("pwd && echo $FOO", cwd="pkg", env={"FOO": "bar"})
        assert r.stdout.splitlines()[1] == "bar"
        assert r.stdout.splitlines()[0].endswith("pkg")


async def test_same_size_edit_is_seen_by_the_next_python_run(provider, workspace):
    # An agent's one-character fix keeps the file's size, and lands within the second that a
    # cached .pyc records: the next run must still execute the new source, not stale bytecode.
    async with await provider.create(workspace) as sb:
        await sb.write_file("mod.py", "VALUE = 'a - b'\n")
        assert (await sb.exec(["python3", "-c", "import mod; print(mod.VALUE)"])).stdout == "a - b\n"
        await sb.write_file("mod.py", "VALUE = 'a + b'\n")
        assert (await sb.exec(["python3", "-c", "import mod; print(mod.VALUE)"])).stdout == "a + b\n"


async def test_source_directory_is_never_modified(provider, workspace):
    before = (workspace / "calc.py").read_text()
    async with await provider.create(workspace) as sb:
        await sb.exec("echo changed > calc.py && rm pkg/data.txt && touch new.txt")
        await sb.write_file("calc.py", "x = 1\n")
    assert (workspace / "calc.py").read_text() == before
    assert (workspace / "pkg" / "data.txt").exists()
    assert not (workspace / "new.txt").exists()


async def test_file_api_sees_what_exec_did_and_vice_versa(provider, workspace):
    async with await provider.create(workspace) as sb:
        await sb.write_file("new/dir/f.txt", "from host\n")
        r = await sb.exec("cat new/dir/f.txt && rm pkg/data.txt && echo made > made.txt")
        assert r.stdout == "from host\n"
        assert await sb.read_file("made.txt") == b"made\n"
        with pytest.raises(FileNotFoundError):
            await sb.read_file("pkg/data.txt")
        listed = {e.path: e for e in await sb.list_files()}
        assert "pkg/data.txt" not in listed
        assert listed["new/dir/f.txt"].kind == "file" and listed["new/dir/f.txt"].size == 10
        assert listed["link_in"].kind == "symlink"
        assert listed["pkg"].kind == "dir"
        assert [e.path for e in await sb.list_files("pkg", recursive=False)] == ["pkg/__init__.py"]
        await sb.delete_file("pkg")
        r = await sb.exec("ls")
        assert "pkg" not in r.stdout.split()
        with pytest.raises(FileNotFoundError):  # the link's target went with pkg/
            await sb.read_file("/home/dev/project/link_in")


async def test_file_api_names_are_exact_edge_whitespace_included(provider, workspace):
    """`"calc.py "` and `" pkg"` are entries of their own, not `calc.py` and `pkg`: grading reads new
    files through this API, and a stripped path would check one file in place of another."""
    async with await provider.create(workspace) as sb:
        made = await sb.exec(
            ["sh", "-c", "echo spaced > 'calc.py ' && mkdir ' pkg' && echo in > ' pkg/m.py'"]
        )
        assert made.ok, made.stderr
        assert await sb.read_file("calc.py ") == b"spaced\n"
        assert await sb.read_file(" pkg/m.py") == b"in\n"
        assert b"def add" in await sb.read_file("calc.py")
        listed = {e.path for e in await sb.list_files()}
        assert {"calc.py ", " pkg", " pkg/m.py", "calc.py", "pkg"} <= listed
        await sb.write_file("notes.txt\t", "tab\n")
        assert (await sb.exec(["cat", "notes.txt\t"])).stdout == "tab\n"
        with pytest.raises(FileNotFoundError):
            await sb.read_file("notes.txt")
        await sb.delete_file(" pkg")
        await sb.delete_file("calc.py ")
        left = {e.path for e in await sb.list_files()}
        assert " pkg" not in left and "calc.py " not in left and {"calc.py", "pkg"} <= left


async def test_file_api_rejects_escapes(provider, workspace, tmp_path: Path):
    async with await provider.create(workspace) as sb:
        await sb.exec(f"ln -s {tmp_path} out_link")
        for bad in ("../x", "/etc/passwd", "out_link/secret"):
            with pytest.raises(PathOutsideWorkspace):
                await sb.write_file(bad, "x")
            with pytest.raises(PathOutsideWorkspace):
                await sb.read_file(bad)
        assert not (tmp_path / "secret").exists()


async def test_tmp_is_private_and_persists_across_execs(provider, workspace):
    async with await provider.create(workspace) as a, await provider.create(workspace) as b:
        await a.exec('echo a > "${TMPDIR:-/tmp}/note"')
        assert (await a.exec('cat "${TMPDIR:-/tmp}/note"')).stdout == "a\n"
        assert (await b.exec('cat "${TMPDIR:-/tmp}/note"')).exit_code != 0


async def test_snapshot_restore_and_create_from_snapshot(provider, workspace):
    async with await provider.create(workspace) as sb:
        await sb.write_file("calc.py", "v1\n")
        await sb.delete_file("pkg/data.txt")
        snap = await sb.snapshot()
        await sb.write_file("calc.py", "v2\n")
        await sb.exec("mkdir -p later && echo x > later/f")
        await sb.restore(snap)
        assert await sb.read_file("calc.py") == b"v1\n"
        assert not (await sb.exec("test -e later")).ok
        assert not (await sb.exec("test -e pkg/data.txt")).ok
        snap2 = await sb.snapshot()
        await sb.write_file("calc.py", "v3\n")
        async with await provider.create(snap) as other:
            assert await other.read_file("calc.py") == b"v1\n"
            assert (await other.exec("cat calc.py")).stdout == "v1\n"
            with pytest.raises(FileNotFoundError):
                await other.read_file("pkg/data.txt")
        async with await provider.create(snap2) as other2:
            assert await other2.read_file("calc.py") == b"v1\n"
    with pytest.raises(SandboxNotFound):
        await provider.create("snap-doesnotexist")


async def test_many_snapshots_stack(provider, workspace):
    async with await provider.create(workspace) as sb:
        snaps = []
        for i in range(12):
            await sb.write_file(f"f{i}.txt", str(i))
            snaps.append(await sb.snapshot())
        await sb.restore(snaps[3])
        names = {e.path for e in await sb.list_files(".", recursive=False)}
        assert {"f0.txt", "f3.txt"} <= names and "f4.txt" not in names
        assert (await sb.exec("cat f3.txt")).stdout == "3"


async def test_timeout_kills_command(provider, workspace):
    async with await provider.create(workspace) as sb:
        r = await sb.exec("sleep 30", timeout_s=0.5)
        assert r.timed_out and not r.ok
        assert r.duration_s < 10


async def test_output_is_capped(provider, workspace):
    async with await provider.create(workspace) as sb:
        r = await sb.exec("head -c 5000000 /dev/zero | tr '\\0' a; echo done >&2")
        assert r.stdout_truncated and len(r.stdout) == 64 * 1024
        assert r.stderr == "done\n" and not r.stderr_truncated


async def test_parallel_execs_in_one_sandbox(provider, workspace):
    async with await provider.create(workspace) as sb:
        results = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(6)))
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(6)]


async def test_closed_sandbox_refuses_and_close_is_idempotent(provider, workspace):
    sb = await provider.create(workspace)
    await sb.close()
    await sb.close()
    with pytest.raises(SandboxNotFound):
        await sb.exec("true")


async def test_info(provider, workspace):
    async with await provider.create(workspace) as sb:
        info = sb.info
        assert info.sandbox_id == sb.sandbox_id
        assert info.isolated == (info.backend != "process")


async def test_deleted_and_recreated_directories_stay_deleted(provider, workspace):
    # On overlay backends this exercises whiteouts and opaque directories, through snapshots.
    async with await provider.create(workspace) as sb:
        await sb.exec("rm -rf pkg && mkdir pkg && echo new > pkg/new.txt && rm calc.py")
        expected = ["link_in", "pkg", "pkg/new.txt"]
        assert [e.path for e in await sb.list_files()] == expected
        snap = await sb.snapshot()
        async with await provider.create(snap) as child:
            assert [e.path for e in await child.list_files()] == expected
            assert (await child.exec("ls -A pkg; test -e calc.py || echo gone")).stdout == "new.txt\ngone\n"
            await child.write_file("calc.py", "back\n")
            assert (await child.exec("cat calc.py")).stdout == "back\n"


async def test_file_ops_racing_snapshots_all_land(provider, workspace):
    async with await provider.create(workspace) as sb:
        writes = [sb.write_file(f"c/{i}.txt", str(i)) for i in range(20)]
        snaps = [sb.snapshot() for _ in range(3)]
        results = await asyncio.gather(*writes[:10], *snaps, *writes[10:])
        assert sorted(e.path for e in await sb.list_files("c")) == sorted(f"c/{i}.txt" for i in range(20))
        for snap_id in results[10:13]:
            async with await provider.create(snap_id) as child:
                assert len(await child.list_files("c")) >= 10  # every write before it, at least


async def test_reading_a_fifo_is_refused_not_hung(provider, workspace):
    async with await provider.create(workspace) as sb:
        assert (await sb.exec("mkfifo pipe")).ok
        with pytest.raises(SandboxError):
            await asyncio.wait_for(sb.read_file("pipe"), timeout=10)


async def test_planted_symlinks_do_not_redirect_host_writes(provider, workspace, tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("original")
    async with await provider.create(workspace) as sb:
        # Every name a naive writer might use for its temp file, plus the file itself.
        await sb.exec(f"ln -s {target} .f.txt.inhabit-tmp; ln -s {target} f.txt.tmp; ln -s {target} g.txt")
        await sb.write_file("f.txt", "new")
        with pytest.raises(PathOutsideWorkspace):
            await sb.write_file("g.txt", "new")
        assert await sb.read_file("f.txt") == b"new"
    assert target.read_text() == "original"


async def test_close_after_hostile_tree_changes_nothing_outside(provider, workspace, tmp_path):
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("x")
    mode = victim.stat().st_mode
    sb = await provider.create(workspace)
    # Read-only dirs, links to host paths and a FIFO: cleanup must remove them, not follow them.
    await sb.exec(f"mkdir -p ro/sub && ln -s {victim} ro/sub/link && mkfifo ro/fifo && chmod 500 ro/sub ro")
    await sb.close()
    assert (victim / "keep.txt").read_text() == "x" and victim.stat().st_mode == mode
