"""The bwrap sandbox's supervisor (one bwrap per sandbox, each exec a fork inside it).

Real sandboxes only. What the per-exec bwrap promised must hold through the supervisor: nothing an
exec started outlives it, timeouts and caps, parallel execs, restore, recovery when the
supervisor dies, and a control channel no sandboxed process can reach. The last test runs the
same commands through both paths and wants the same results.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import time

import pytest
from tests.unit.sandbox.conftest import small_limits
from tests.unit.sandbox.test_bwrap_hostile import procs_with, wait_gone

from inhabit.errors import SandboxError
from inhabit.sandbox.bwrap import BwrapSandboxProvider, bwrap_problem
from inhabit.sandbox.signals import LIBC_RESERVED

pytestmark = pytest.mark.skipif(bwrap_problem() is not None, reason="bwrap does not work on this host")


@pytest.fixture(params=["auto", "copy"])
def prov(request):
    p = BwrapSandboxProvider(limits=small_limits(), workspace_mode=request.param, supervise_after=0)
    assert p.supervise
    yield p
    p._cleanup_sync()


def _marker() -> str:
    return f"{900 + secrets.randbelow(99)}.{secrets.randbelow(10**6)}"


def _supervisor(sb):
    return sb._sup_task.result()


async def test_setsid_daemon_dies_when_its_exec_ends(prov, workspace):
    marker = _marker()
    async with await prov.create(workspace) as sb:
        r = await sb.exec(
            f"setsid sleep {marker} & (sleep {marker} &); nohup sleep {marker} >/dev/null 2>&1 & echo up"
        )
        assert r.stdout == "up\n" and r.ok and r.duration_s < 10
        # Killed and reaped before the exec reported: none is left, without waiting.
        assert procs_with(marker) == []
        assert (await sb.exec("ps -e -o comm= | grep -c sleep")).stdout == "0\n"
    assert prov.exec_counts["supervised"] == 2 and prov.exec_counts["per_exec_bwrap"] == 0


async def test_timeout_kills_the_tree_and_the_supervisor_stays(prov, workspace):
    marker = _marker()
    async with await prov.create(workspace) as sb:
        r = await sb.exec(f"setsid sleep {marker} & sleep {marker}", timeout_s=1)
        assert r.timed_out and r.exit_code == -signal.SIGKILL and r.duration_s < 10
        assert r.limit_hit.startswith("time")
        assert wait_gone(marker) == []
        assert (await sb.exec("echo again")).stdout == "again\n"
    assert prov.exec_counts["supervisor_starts"] == 1


async def test_the_first_exec_takes_its_own_bwrap_by_default(provider_factory, workspace):
    prov = provider_factory("bwrap")
    async with await prov.create(workspace) as one_shot:
        assert (await one_shot.exec("echo 1")).stdout == "1\n"
    assert prov.exec_counts == {"per_exec_bwrap": 1}
    async with await prov.create(workspace) as sb:
        for i in range(3):
            assert (await sb.exec(f"echo {i}")).stdout == f"{i}\n"
    assert prov.exec_counts == {"per_exec_bwrap": 2, "supervised": 2, "supervisor_starts": 1}


async def test_output_is_capped(prov, workspace):
    async with await prov.create(workspace) as sb:
        r = await sb.exec("yes flood", timeout_s=1)
        assert r.timed_out and r.stdout_truncated and len(r.stdout) == 64 * 1024
        r = await sb.exec("head -c 3000000 /dev/zero >&2; echo done")
        assert r.stderr_truncated and len(r.stderr) == 64 * 1024 and r.stdout == "done\n"


async def test_concurrent_execs_in_one_sandbox(prov, workspace):
    marker = _marker()
    async with await prov.create(workspace) as sb:
        await sb.exec("true")
        t = time.perf_counter()
        slow = asyncio.ensure_future(sb.exec(f"sleep {marker}", timeout_s=2))
        results = await asyncio.gather(
            *(sb.exec(f"sleep 0.5; echo {i} > /tmp/{i}; cat /tmp/{i}", stdin=b"x") for i in range(8))
        )
        assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]
        assert time.perf_counter() - t < 4  # in parallel, not one after the other
        assert (await slow).timed_out  # one exec's timeout ends that exec only
        assert wait_gone(marker) == []
        assert all(r.ok for r in results)


async def test_restore_then_exec_sees_the_restored_files(prov, workspace):
    async with await prov.create(workspace) as sb:
        assert (await sb.exec("echo 1 > v.txt")).ok
        snap = await sb.snapshot()
        assert (await sb.exec("echo 2 > v.txt; touch new.txt; cat v.txt")).stdout == "2\n"
        await sb.restore(snap)
        r = await sb.exec("cat v.txt; ls new.txt 2>&1 || true")
        assert r.stdout.startswith("1\n") and "No such file" in r.stdout
        assert (await sb.exec("echo 3 > v.txt")).ok
        snap2 = await sb.snapshot()  # overlay: the layer frozen under a running supervisor
        assert (await sb.exec("cat v.txt; echo 4 > v.txt")).stdout == "3\n"
        await sb.restore(snap2)
        assert (await sb.exec("cat v.txt")).stdout == "3\n"


async def test_supervisor_death_is_detected_and_it_restarts(prov, workspace):
    marker = _marker()
    async with await prov.create(workspace) as sb:
        assert (await sb.exec("echo a")).ok
        os.killpg(_supervisor(sb).pgid, signal.SIGKILL)  # dead while idle
        await asyncio.sleep(0.2)
        assert (await sb.exec("echo b")).stdout == "b\n"
        assert prov.exec_counts["supervisor_starts"] == 2
        task = asyncio.ensure_future(sb.exec(f"sleep {marker}"))
        deadline = time.monotonic() + 5
        while not procs_with(marker) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        os.killpg(_supervisor(sb).pgid, signal.SIGKILL)  # dead mid-exec: that exec ends, no hang
        r = await asyncio.wait_for(task, 10)
        assert not r.ok and r.exit_code == -signal.SIGKILL
        assert wait_gone(marker) == []
        assert (await sb.exec("echo c")).stdout == "c\n"
        assert prov.exec_counts["supervisor_starts"] == 3


async def test_no_tells_in_the_process_table(prov, workspace):
    host = os.uname().nodename
    words = ["inhabit", "bwrap", "bubblewrap", "sandbox", str(prov.root), *([host] if len(host) > 3 else [])]
    async with await prov.create(workspace) as sb:
        await sb.exec("true")
        r = await sb.exec(
            "sleep 5 & for p in /proc/[0-9]*; do cat $p/comm; tr '\\0' ' ' < $p/cmdline; echo; "
            "tr '\\0' '\\n' < $p/environ; done 2>/dev/null; ps -eo comm,args"
        )
    assert "init" in r.stdout and "sleep 5" in r.stdout
    assert not [w for w in words if w.lower() in r.stdout.lower()], r.stdout


async def test_kill_all_from_inside_ends_the_execs_in_flight_and_leaves_nothing(prov, workspace):
    marker = _marker()
    async with await prov.create(workspace) as sb:
        await sb.exec("true")
        other = asyncio.ensure_future(sb.exec(f"setsid sleep {marker} & sleep {marker}"))
        deadline = time.monotonic() + 5
        while len(procs_with(marker)) < 2 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        r = await sb.exec(f"sleep {marker} & kill -9 -1; sleep 1; echo after")
        assert r.exit_code == -signal.SIGKILL and "after" not in r.stdout
        assert (await asyncio.wait_for(other, 10)).exit_code == -signal.SIGKILL
        assert wait_gone(marker) == []
        assert (await sb.exec("echo fine")).stdout == "fine\n"
    assert prov.exec_counts["supervisor_starts"] == 1  # PID 1 survived it


async def test_control_channel_is_out_of_reach(prov, workspace):
    probe = """
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
for pid in (1, os.getppid()):  # the supervisor and this exec's exec-init
    for what in ("fd", "environ", "mem", "fdinfo/0"):
        try:
            os.listdir(f"/proc/{pid}/{what}") if what == "fd" else open(f"/proc/{pid}/{what}", "rb").read(1)
            print("OPENED", pid, what)
        except OSError:
            pass
    for n in range(64):
        try:
            os.close(os.open(f"/proc/{pid}/fd/{n}", os.O_RDWR))
            print("OPENED", pid, n)
        except OSError:
            pass
    print("ptrace", pid, libc.ptrace(16, pid, 0, 0))  # PTRACE_ATTACH
os.kill(1, signal.SIGKILL)  # PID 1 takes no signal from inside its namespace
print("fds", sorted(os.listdir("/proc/self/fd")))
"""
    async with await prov.create(workspace) as sb:
        r = await sb.exec(["python3", "-c", probe])
        assert "OPENED" not in r.stdout, r.stdout
        assert "ptrace 1 -1" in r.stdout and r.stdout.count(" -1\n") == 2, r.stdout
        assert "fds ['0', '1', '2', '3']" in r.stdout  # 3: the listing's own
        # No socket (nor anything else of ours) in the sandbox's file system.
        r = await sb.exec(
            "find / -xdev -type s 2>/dev/null; find /tmp /dev/shm /home -type s 2>/dev/null; echo end"
        )
        assert r.stdout == "end\n"
        assert (await sb.exec("echo alive")).ok
    assert prov.exec_counts["supervisor_starts"] == 1  # the SIGKILL to PID 1 did nothing


async def test_a_launch_failure_is_an_error_not_a_fallback(prov, workspace):
    if prov.cgroups is None:
        pytest.skip("needs cgroups")
    async with await prov.create(workspace) as sb:
        prov.cgroups.remove(sb._groups)  # the sandbox's cgroups vanish before its supervisor starts
        with pytest.raises(SandboxError, match="could not start a command"):
            await sb.exec("true")
    assert prov.exec_counts["per_exec_bwrap"] == 0


async def test_a_request_too_large_for_the_channel_takes_the_old_path(prov, workspace):
    args = ["x" * 100_000] * 12  # 1.2 MB of arguments: more than one control message holds
    async with await prov.create(workspace) as sb:
        r = await sb.exec(["python3", "-c", "import sys; print(len(sys.argv), len(sys.argv[1]))", *args])
        assert r.stdout == "13 100000\n"
        assert (await sb.exec("echo small")).ok
    assert prov.exec_counts["per_exec_bwrap"] == 1 and prov.exec_counts["supervised"] == 1


_SAME: list[str | list[str]] = [
    "echo out; echo err >&2; exit 3",
    "kill -TERM $$",
    "id; umask; pwd; hostname; echo $HOME $PATH $PYTHONDONTWRITEBYTECODE",
    "ulimit -t; ulimit -c; ulimit -Hc; ulimit -f; ulimit -n",
    # Signal state as a program can see it: the C library's own signals (32, 33) aside, which
    # posix_spawn leaves ignored and no program can use (see test_fidelity).
    "python3 -c \"import re\nfor l in open('/proc/self/status'):\n"
    "    if re.match('(Sig(Ign|Blk|Cgt)|NoNewPrivs|Cap(Prm|Eff|Bnd|Amb)):', l):\n"
    f'        print(l.split()[0], int(l.split()[1], 16) & ~{LIBC_RESERVED})"',
    "grep -E '^(NoNewPrivs|Cap(Prm|Eff|Bnd|Amb))' /proc/self/status",
    "ls /proc/self/fd; cat /tmp/seen 2>&1; echo x > /tmp/seen",
    "cat; echo; cat sub/f.txt",
    "python3 -c 'import sys, os; print(sys.prefix, os.getcwd(), sys.flags.dont_write_bytecode)'",
    "printf '#!/bin/sh\\necho script $1\\n' > s.sh; printf 'echo no shebang $1\\n' > n.sh; chmod +x s.sh n.sh; "
    "./s.sh a; ./n.sh b; sh -c 'exec ./n.sh c'; : > t.sh; chmod -x t.sh; ./t.sh; echo $?",
    ["./n.sh", "as argv"],  # no #! line: run by the shell, as dash's exec does
    ["./s.sh", "as argv"],
    ["python3", "-c", "import sys; print(sys.argv[1:]); sys.exit(130)", "a b", ""],
    "yes | head -c 100000",
    "sleep 30",
]


@pytest.mark.parametrize("mode", ["auto", "copy"])
async def test_both_paths_give_the_same_results(workspace, mode):
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("in sub\n")
    results = {}
    for supervise in (True, False):
        prov = BwrapSandboxProvider(
            limits=small_limits(), workspace_mode=mode, supervisor=supervise, supervise_after=0
        )
        try:
            async with await prov.create(workspace) as sb:
                got = []
                for cmd in _SAME:
                    r = await sb.exec(
                        cmd, stdin=b"piped", env={"X": "1"}, timeout_s=1 if cmd == "sleep 30" else None
                    )
                    got.append(
                        (r.exit_code, r.stdout, r.stderr, r.timed_out, r.stdout_truncated, r.limit_hit)
                    )
                got.append(await sb.exec(["no-such-command"]))
                results[supervise] = got
            assert prov.exec_counts["per_exec_bwrap" if not supervise else "supervised"] == len(_SAME) + 1
        finally:
            await prov.close()
    new, old = results[True], results[False]
    for cmd, a, b in zip(_SAME, new[:-1], old[:-1], strict=True):
        assert a == b, cmd
    # A command that does not exist: 127 both ways (the message names the shell that said it).
    assert new[-1].exit_code == old[-1].exit_code == 127
    assert "no-such-command: not found" in new[-1].stderr and "not found" in old[-1].stderr


_EXIT_SCRIPT = """
import asyncio, os, sys
from inhabit.sandbox.bwrap import BwrapSandboxProvider
async def main():
    prov = BwrapSandboxProvider(supervise_after=0)
    sb = await prov.create(sys.argv[1])
    print(prov.root, flush=True)
    asyncio.ensure_future(sb.exec("setsid sleep {marker} & sleep {marker}"))
    await asyncio.sleep(1.0)
    print("ready", flush=True)
    sys.exit(0)  # nothing closed: the atexit cleanup must end the supervised exec
asyncio.run(main())
"""


def test_interpreter_exit_mid_exec_leaves_nothing(workspace):
    import subprocess
    import sys
    from pathlib import Path

    marker = _marker()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[3] / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", _EXIT_SCRIPT.format(marker=marker), str(workspace)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    root, ready = proc.stdout.split()
    assert ready == "ready"
    assert wait_gone(marker) == []
    assert not Path(root).exists()
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
