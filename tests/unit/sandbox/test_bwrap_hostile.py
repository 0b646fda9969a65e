"""Hostile input against the bwrap backend: one property per test, as the issue lists them.

Each test runs code that tries to break out and checks the host from outside (files, sockets,
process table, cgroups), never the sandbox's own word for it. Unprivileged runs of the same
attacks live in test_bwrap_unprivileged.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from inhabit.errors import PathOutsideWorkspace

pytestmark = pytest.mark.skipif(
    __import__("inhabit.sandbox.bwrap", fromlist=["x"]).bwrap_problem() is not None,
    reason="bwrap does not work on this host",
)


def procs_with(marker: str) -> list[int]:
    """Host pids whose command line contains `marker` (zombies excluded)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read()
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmd and state != "Z" and int(entry) != os.getpid():
            found.append(int(entry))
    return found


def wait_gone(marker: str, timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := procs_with(marker)) and time.monotonic() < deadline:
        time.sleep(0.02)
    return left


@pytest.fixture(params=["bwrap", "bwrap-copy", "bwrap-supervised"])
def hostile(request, provider_factory):
    return provider_factory(request.param)


@pytest.fixture
def bw(provider_factory):
    return provider_factory("bwrap", memory_mb=128, max_processes=32)


async def test_no_write_outside_workspace_reaches_host(hostile, workspace, tmp_path):
    tag = secrets.token_hex(4)
    targets = [
        f"/tmp/pwn-{tag}",
        f"/pwn-{tag}",
        f"/usr/pwn-{tag}",
        f"/etc/pwn-{tag}",
        f"/root/pwn-{tag}",
        f"{sys.base_prefix}/pwn-{tag}",
        f"{Path(sys.prefix).resolve()}/pwn-{tag}",
        f"{tmp_path}/pwn-{tag}",
        f"{workspace}/pwn-{tag}",
        f"/dev/shm/pwn-{tag}",
    ]
    async with await hostile.create(workspace) as sb:
        script = "; ".join(f"(echo x > {t}) 2>/dev/null; (mkdir -p {t}.d) 2>/dev/null" for t in targets)
        await sb.exec(script)
        # Links planted in the workspace must not let the host-side file API write outside.
        await sb.exec(f"ln -s {tmp_path} out; ln -s ../../../../../../../{tmp_path} rel_out")
        for bad in ("out/pwn", "rel_out/pwn"):
            with pytest.raises(PathOutsideWorkspace):
                await sb.write_file(bad, "x")
    for t in targets:
        assert not os.path.exists(t) and not os.path.exists(t + ".d"), t
    assert not (tmp_path / "pwn").exists()
    assert sorted(p.name for p in workspace.iterdir()) == ["calc.py", "link_in", "pkg"]


async def test_no_write_to_kernel_tunables(hostile, workspace):
    # Writes back the current value of a harmless global sysctl: if it succeeds, the sandbox
    # could equally set kernel.core_pattern (a host-root escape).
    before = Path("/proc/sys/vm/swappiness").read_text()
    async with await hostile.create(workspace) as sb:
        r = await sb.exec("v=$(cat /proc/sys/vm/swappiness); echo $v > /proc/sys/vm/swappiness && echo WROTE")
        assert "WROTE" not in r.stdout
        assert (await sb.exec("echo '|/bin/true' > /proc/sys/kernel/core_pattern && echo WROTE")).stdout == ""
    assert Path("/proc/sys/vm/swappiness").read_text() == before


async def test_sandbox_processes_are_not_host_root(hostile, workspace):
    marker = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6)}"
    async with await hostile.create(workspace) as sb:
        task = asyncio.ensure_future(sb.exec(f"sleep {marker}"))
        deadline = time.monotonic() + 5

        def sleepers() -> list[int]:  # the command itself, not our launcher that names it
            return [
                p
                for p in procs_with(marker)
                if Path(f"/proc/{p}/cmdline").read_bytes().startswith(b"sleep\0")
            ]

        while not (pids := sleepers()) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        uids = {int(Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].split()[0]) for pid in pids}
        await sb.close()
        await task
    assert pids and 0 not in uids, uids


async def test_no_read_of_host_files_outside_the_view(hostile, workspace, tmp_path):
    secret = "SECRET-" + secrets.token_hex(8)
    host_secret = tmp_path / "secret.txt"
    host_secret.write_text(secret)
    root_secret = Path(f"/root/inhabit-test-secret-{secrets.token_hex(4)}")
    root_secret.write_text(secret)
    try:
        async with await hostile.create(workspace) as a, await hostile.create(workspace) as b:
            await b.write_file("b_only.txt", secret)
            r = await a.exec(
                f"cat {host_secret} {root_secret} /etc/shadow /proc/1/root/{root_secret} 2>&1; "
                f"ls -a /root /work /home /var /run /mnt /srv /dev/shm 2>&1; "
                f"grep -rs {secret} /tmp /home /etc /dev/shm /root/inhabit* 2>&1; "
                f"find / -maxdepth 3 -name 'b_only.txt' -o -maxdepth 3 -name 'inhabit-*' 2>/dev/null"
            )
            assert secret not in r.stdout + r.stderr
            assert "b_only" not in r.stdout
            assert not (await a.exec(f"test -e {root_secret} || test -e {host_secret}")).ok
    finally:
        root_secret.unlink()


async def test_no_tcp_connection_to_host_loopback(hostile, workspace):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    accepted: list[object] = []
    stop = threading.Event()

    def accept_loop() -> None:
        while not stop.is_set():
            try:
                accepted.append(listener.accept())
            except TimeoutError:
                continue
            except OSError:
                return

    t = threading.Thread(target=accept_loop, daemon=True)
    t.start()
    try:
        async with await hostile.create(workspace) as sb:
            code = textwrap.dedent(
                f"""
                import socket
                for host in ("127.0.0.1", "localhost", "::1", "10.0.2.2", "1.1.1.1"):
                    try:
                        socket.create_connection((host, {port}), timeout=2).close()
                        print("CONNECTED", host)
                    except OSError as e:
                        print("refused", host, e)
                """
            )
            r = await sb.exec(["python3", "-c", code], timeout_s=30)
        assert "CONNECTED" not in r.stdout, r.stdout
        assert sum(line.startswith("refused ") for line in r.stdout.splitlines()) == 5
    finally:
        stop.set()
        t.join(2)
        listener.close()
    assert accepted == []


async def test_no_unix_socket_connection_to_host(hostile, workspace, tmp_path):
    # A path socket in a host dir the sandbox does not see, and an abstract one (those live in
    # the network namespace, so a new one hides them).
    name = f"inhabit-test-{secrets.token_hex(4)}"
    path_sock, abstract = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    path_sock.bind(str(tmp_path / "s.sock"))
    abstract.bind("\0" + name)
    for s in (path_sock, abstract):
        s.listen(1)
        s.setblocking(False)
    try:
        async with await hostile.create(workspace) as sb:
            code = (
                "import socket\n"
                f"for addr in ({str(tmp_path / 's.sock')!r}, '\\0{name}'):\n"
                "    s = socket.socket(socket.AF_UNIX)\n"
                "    try:\n        s.connect(addr); print('CONNECTED')\n"
                "    except OSError as e:\n        print('refused', e)\n"
            )
            r = await sb.exec(["python3", "-c", code])
        assert r.stdout.count("refused ") == 2 and "CONNECTED" not in r.stdout, r.stdout + r.stderr
        for s in (path_sock, abstract):
            with pytest.raises(BlockingIOError):
                s.accept()
    finally:
        path_sock.close()
        abstract.close()


async def test_memory_hog_is_stopped_and_others_keep_working(bw, workspace):
    async with await bw.create(workspace) as hog, await bw.create(workspace) as other:
        hog_task = asyncio.ensure_future(
            hog.exec(["python3", "-c", "x = b'x' * (1 << 30); print('allocated')"], timeout_s=30)
        )
        r_other = await other.exec("echo fine")
        r = await hog_task
        assert not r.ok and "allocated" not in r.stdout
        assert r_other.stdout == "fine\n"
        assert (await hog.exec("echo still-usable")).stdout == "still-usable\n"


async def test_fork_bomb_is_stopped_and_others_keep_working(bw, workspace):
    if bw.cgroups is None and os.geteuid() == 0:
        pytest.skip("as root without a pids cgroup nothing bounds a fork bomb (RLIMIT_NPROC spares uid 0)")
    marker = f"bomb{secrets.token_hex(4)}"
    code = f"import os, time  # {marker}\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
    async with await bw.create(workspace) as bomb, await bw.create(workspace) as other:
        bomb_task = asyncio.ensure_future(bomb.exec(["python3", "-c", code], timeout_s=3))
        await asyncio.sleep(0.5)
        assert 4 <= len(procs_with(marker)) <= 32  # it did fork, and the process cap holds
        r_other = await other.exec("echo fine; python3 -c 'print(1 + 1)'")
        assert r_other.stdout == "fine\n2\n"
        r = await bomb_task
        assert r.timed_out
    assert wait_gone(marker) == []
    assert subprocess.run(["true"], check=False).returncode == 0  # the host still forks


async def test_disk_written_is_capped(provider_factory, workspace):
    prov = provider_factory("bwrap", memory_mb=1024, disk_mb=32)
    if not prov.tmpfs_volumes:
        pytest.skip("per-sandbox tmpfs volumes need root")
    async with await prov.create(workspace) as sb:
        # Many files each under the per-file cap (RLIMIT_FSIZE): the volume's size must stop them.
        r = await sb.exec(
            "for i in 1 2 3 4 5 6; do dd if=/dev/zero of=f$i bs=1M count=12 2>&1; done; cat f* | wc -c"
        )
        assert int(r.stdout.split()[-1]) <= 32 * 1024 * 1024
        assert "No space left" in r.stdout


async def test_cpu_time_is_capped(provider_factory, workspace):
    prov = provider_factory("bwrap", cpu_time_s=1)
    async with await prov.create(workspace) as sb:
        r = await sb.exec(["python3", "-c", "while True: pass"], timeout_s=30)
        assert not r.timed_out and r.exit_code == -signal.SIGXCPU
        assert r.duration_s < 20


async def test_timeout_kills_command_and_children(bw, workspace):
    marker = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6)}"
    async with await bw.create(workspace) as sb:
        for _ in range(2):  # the sandbox's own processes (its supervisor), if any, are up
            await sb.exec("true")
        resident = _cgroup_pids(bw, sb)
        r = await sb.exec(
            f"sleep {marker} & (sleep {marker} &) ; setsid sleep {marker} & sleep {marker}", timeout_s=1
        )
        assert r.timed_out and r.duration_s < 10
        assert wait_gone(marker) == []
        if bw.cgroups is not None:  # dying processes leave the cgroup's list within moments
            deadline = time.monotonic() + 5
            # (A subset: an exec-init that reported may still have been exiting in `resident`.)
            while not _cgroup_pids(bw, sb) <= resident and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            assert _cgroup_pids(bw, sb) <= resident


def _cgroup_pids(prov, sb) -> set[int]:
    if prov.cgroups is None:
        return set()
    return {int(p) for g in sb._groups for p in (g / "cgroup.procs").read_text().split()}


async def test_output_flood_is_capped(bw, workspace):
    async with await bw.create(workspace) as sb:
        r = await sb.exec("yes flood; ", timeout_s=1)
        assert r.timed_out
        assert r.stdout_truncated and len(r.stdout) == 64 * 1024
        r = await sb.exec("head -c 300000000 /dev/zero >&2; echo done")
        assert r.stderr_truncated and len(r.stderr) == 64 * 1024 and r.stdout == "done\n"


async def test_no_process_left_after_close_even_mid_exec(bw, workspace):
    marker = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6)}"
    sb = await bw.create(workspace)
    task = asyncio.ensure_future(sb.exec(f"sleep {marker} & sleep {marker}"))
    deadline = time.monotonic() + 5
    while len(procs_with(marker)) < 2 and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert len(procs_with(marker)) >= 2
    await sb.close()
    r = await task
    assert not r.ok
    assert wait_gone(marker) == []
    assert not sb._volume.path.exists()


async def test_no_process_left_after_task_cancellation(bw, workspace):
    marker = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6)}"
    async with await bw.create(workspace) as sb:
        task = asyncio.ensure_future(sb.exec(f"sleep {marker} & sleep {marker}"))
        deadline = time.monotonic() + 5
        while len(procs_with(marker)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert wait_gone(marker) == []
        assert (await sb.exec("echo after")).stdout == "after\n"


_EXIT_SCRIPT = """
import asyncio, sys, os
from inhabit.sandbox.bwrap import BwrapSandboxProvider
def running():
    # The command itself (`sleep MARKER`), not bwrap or its launcher, whose argv holds the marker
    # too: before bwrap has set --die-with-parent, a SIGKILL here would leave it running.
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{{p}}/cmdline", "rb") as f:
                if f.read().split(b"\\0")[:2] == [b"sleep", b"{marker}"]:
                    return True
        except OSError:
            pass  # gone meanwhile
    return False
async def main():
    prov = BwrapSandboxProvider()
    sb = await prov.create(sys.argv[1])
    print(prov.root, flush=True)
    asyncio.ensure_future(sb.exec("sleep {marker}"))
    # Until the command runs (a fixed wait was too short on a loaded machine).
    for _ in range(3000):
        await asyncio.sleep(0.01)
        if running():
            break
    if sys.argv[2] == "kill":
        print("ready", flush=True)
        await asyncio.sleep(60)
    # leave without closing anything: atexit must clean up
    os.write(1, b"ready\\n")
    sys.exit(0)
asyncio.run(main())
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_no_process_left_at_interpreter_exit_or_sigkill(workspace, how):
    marker = f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6)}"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3] / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", _EXIT_SCRIPT.format(marker=marker), str(workspace), how],
        stdout=subprocess.PIPE,
        env=env,
        text=True,
    )
    assert proc.stdout is not None
    root = Path(proc.stdout.readline().strip())
    assert proc.stdout.readline().strip() == "ready"
    assert len(procs_with(marker)) >= 1
    if how == "kill":
        os.kill(proc.pid, signal.SIGKILL)  # no atexit: --die-with-parent must end the sandbox
    proc.wait(20)
    assert wait_gone(marker) == []
    if how == "exit":
        assert not root.exists()
        assert str(root) not in Path("/proc/self/mountinfo").read_text()
    else:
        # The next provider sweeps what a killed one left behind (its pid is dead now).
        from inhabit.sandbox.bwrap import BwrapSandboxProvider

        asyncio.run(BwrapSandboxProvider().close())
        assert not root.exists()
        assert str(root) not in Path("/proc/self/mountinfo").read_text()


async def test_host_file_api_cannot_be_raced_outside(hostile, workspace, tmp_path):
    # A command flips `d` between a real directory and a symlink to a host dir while the host
    # writes d/x. File operations never overlap an exec (no sandboxed process exists to race
    # the path check), so the write waits for the command and lands in the workspace.
    outside = tmp_path / "outside"
    outside.mkdir()
    flip = f"for i in $(seq 50); do rm -rf d; ln -s {outside} d; rm -f d; mkdir d; done"
    async with await hostile.create(workspace) as sb:
        racer = asyncio.ensure_future(sb.exec(flip, timeout_s=30))
        await asyncio.sleep(0.05)
        with contextlib.suppress(PathOutsideWorkspace):
            await sb.write_file("d/x", "pwned")
        assert racer.done()  # the write was held until the racing command had finished
        await racer
        assert await sb.read_file("d/x") == b"pwned"
    assert list(outside.iterdir()) == []
