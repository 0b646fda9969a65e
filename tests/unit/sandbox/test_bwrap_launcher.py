"""The compiled root launcher (`_launcher.c`) starts bwrap exactly as the shell launcher did: the
same host credentials, capabilities, signal state, rlimits and cgroups for bwrap and everything
in the sandbox, seen from the host and from inside; and bwrap reads a table without the other
sandboxes' volumes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.unit.sandbox.conftest import small_limits

from inhabit.sandbox import bwrap
from inhabit.sandbox.bwrap import BwrapSandboxProvider, bwrap_problem, can_mount

pytestmark = [
    pytest.mark.skipif(bwrap_problem() is not None, reason="bwrap does not work on this host"),
    pytest.mark.skipif(not can_mount(), reason="the launchers run as root"),
    pytest.mark.skipif(
        bwrap._compiled_launcher() is None,
        reason="the compiled launcher is not built here (setup.py build_ext --inplace builds it)",
    ),
]

# What a process's /proc/<pid>/status says about who it is and what it may do.
STATUS = ("Uid", "Gid", "Groups", "CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp")
SIGNALS = ("SigBlk", "SigIgn")
# Inside: the same, every rlimit soft and hard, the cgroups and the open fds.
INSIDE = (
    "grep -E '^(Uid|Gid|Groups|Cap...|NoNewPrivs|Seccomp|SigBlk|SigIgn):' /proc/self/status; "
    "ulimit -Sa; ulimit -Ha; cat /proc/self/cgroup; ls /proc/self/fd; "
    "grep -E '^(Uid|Cap...|SigBlk|SigIgn):' /proc/1/status; awk '{print $5, $9}' /proc/self/mountinfo"
)


def _tree(pid: int) -> list[int]:
    """`pid` and its descendants, parents before children, siblings by pid."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            continue
        todo += sorted(int(k) for k in kids)
    return out


def _host_view(pid: int, sandbox_id: str) -> list[dict[str, str]]:
    """For bwrap and every process below it, what the host sees: name, credentials, signal
    state, rlimits and cgroups (the sandbox's id replaced, the rest of each path kept)."""
    view = []
    for p in _tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text().splitlines()
            entry = {"comm": Path(f"/proc/{p}/comm").read_text().strip()}
            for line in status:
                key, _, value = line.partition(":")
                if key in STATUS or key in SIGNALS:
                    entry[key] = value.strip()
            entry["limits"] = Path(f"/proc/{p}/limits").read_text()
            entry["cgroup"] = Path(f"/proc/{p}/cgroup").read_text().replace(sandbox_id, "SB")
        except OSError:
            continue  # gone meanwhile (a short-lived helper)
        view.append(entry)
    return view


async def _launch_view(prov: BwrapSandboxProvider, workspace: Path, supervised: bool):
    """(host view, inside view) of one exec, per-exec bwrap or through the supervisor."""
    async with await prov.create(workspace) as sb:
        if supervised:
            assert (await sb.exec("true")).ok  # the next exec goes through the supervisor
        # The shell waits without forking (a shell that forks blocks every signal for that
        # instant, and the view would catch it at chance): it opens a FIFO for reading, which
        # blocks until the host opens it for writing.
        assert (await sb.exec("mkfifo -m 666 gate")).ok
        run = asyncio.create_task(sb.exec(f": > started; read go < gate; {INSIDE}"))
        for _ in range(1000):
            if (sb.workspace / "started").exists() or run.done():
                break
            await asyncio.sleep(0.02)
        assert not run.done(), run.result()
        (leader,) = sb._pgids
        await asyncio.sleep(0.1)  # from `started` to the open of the gate: no fork, a few steps
        host = _host_view(leader, sb.sandbox_id)
        await asyncio.to_thread((sb.workspace / "gate").write_text, "go\n")
        result = await run
        assert result.ok, result
    counts = prov.exec_counts
    assert counts["supervised" if supervised else "per_exec_bwrap"] >= 1
    return host, result.stdout


@pytest.mark.parametrize("supervised", [False, True], ids=["per-exec", "supervisor"])
async def test_both_launchers_start_the_same_processes(workspace, supervised):
    views = []
    for compiled in (False, True):
        prov = BwrapSandboxProvider(limits=small_limits(), compiled_launcher=compiled)
        try:
            assert (prov.launcher is not None) == compiled
            views.append(await _launch_view(prov, workspace, supervised))
        finally:
            await prov.close()
    (shell_host, shell_inside), (compiled_host, compiled_inside) = views
    assert compiled_inside == shell_inside
    assert [p["comm"] for p in compiled_host] == [p["comm"] for p in shell_host]
    for shell, compiled in zip(shell_host, compiled_host, strict=True):
        assert compiled == shell, compiled["comm"]
    # And what both must be: no capability anywhere, no blocked signal in the sandbox (bwrap
    # blocks SIGCHLD in its own process, to read it from a signalfd), and bwrap and the command
    # in the sandbox's cgroups.
    for p in compiled_host:
        assert p["CapEff"] == p["CapPrm"] == p["CapAmb"] == "0000000000000000", p
        assert p["comm"] == "bwrap" or p["SigBlk"] == "0000000000000000", p
    if BwrapSandboxProvider(limits=small_limits()).cgroups is not None:
        assert all("/SB" in p["cgroup"] for p in compiled_host)


async def test_bwrap_reads_a_table_without_the_other_sandboxes(workspace):
    prov = BwrapSandboxProvider(limits=small_limits())
    try:
        assert prov.own_view is not None
        other = await prov.create(workspace)
        async with await prov.create(workspace) as sb:
            run = asyncio.create_task(sb.exec("touch started; while [ ! -e go ]; do sleep 0.02; done"))
            for _ in range(1000):
                if (sb.workspace / "started").exists() or run.done():
                    break
                await asyncio.sleep(0.02)
            (leader,) = sb._pgids
            table = Path(f"/proc/{leader}/mountinfo").read_text()  # bwrap's own process
            (sb.workspace / "go").write_text("")
            assert (await run).ok
        # Its own volume and overlay at the view, no other sandbox's volume, no sandbox tree.
        assert f" {prov.own_view} " in table and f" {prov.own_view}/merged " in table
        assert str(other._volume.path) not in table
        assert f" {prov.root / 'sb'} " not in table
        # The launch namespace itself still has both (the copy changed nothing there).
        assert prov.launch_ns is not None
        launch = Path(f"/proc/{prov.launch_ns.pid}/mountinfo").read_text()
        assert f" {other._volume.path} " in launch
        await other.close()
    finally:
        await prov.close()


@pytest.mark.parametrize(
    "args",
    [["-g", "/nonexistent/cgroup.procs"], ["-r", "0:5"], ["-v", "/a:/b:/c"], ["-x", "1"], ["-p", "1"], []],
    ids=["cgroup", "rlimit", "view-without-namespace", "unknown", "parent-gone", "no-program"],
)
def test_a_failed_step_exits_125_before_anything_runs(tmp_path, args):
    marker = tmp_path / "ran"
    tail = ["--", "/bin/sh", "-c", f"touch {marker}"] if args else ["--"]
    r = subprocess.run([bwrap.LAUNCHER, *args, *tail], capture_output=True, text=True, timeout=10)
    assert r.returncode == 125, r
    assert r.stderr.startswith("inhabit: could not launch the sandbox: "), r.stderr
    assert not marker.exists()


def _state(pid: int) -> str | None:
    """A process's state letter (Z: exited, not yet reaped), None once it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _launch_under_a_parent(with_parent: bool) -> tuple[subprocess.Popen, int]:
    """(a parent process, the pid of `sleep 60` that it started through the launcher as nobody,
    naming itself with -p where `with_parent`), once the launcher has exec'd sleep."""
    die = "'-p', str(os.getpid()), " if with_parent else ""
    script = (
        "import os, subprocess, time\n"
        f"p = subprocess.Popen([{bwrap.LAUNCHER.as_posix()!r}, '-u', '65534:65534', {die}'--', '/bin/sleep', '60'])\n"
        "print(p.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    pid = int(parent.stdout.readline())
    for _ in range(500):
        if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep":
            break
        time.sleep(0.01)
    assert "65534" in Path(f"/proc/{pid}/status").read_text().split("Uid:")[1].splitlines()[0]
    return parent, pid


def test_the_program_dies_with_the_parent_that_started_the_launcher():
    """-p: the parent-death signal, set after the uid drop (which clears it) and kept across the
    exec: a provider killed before bwrap sets its own --die-with-parent leaves nothing running."""
    parent, pid = _launch_under_a_parent(with_parent=True)
    parent.kill()
    parent.wait()
    for _ in range(500):
        if _state(pid) in (None, "Z"):
            break
        time.sleep(0.01)
    assert _state(pid) in (None, "Z")

    # Without -p the same program outlives its parent: what the option is there for.
    parent, pid = _launch_under_a_parent(with_parent=False)
    try:
        parent.kill()
        parent.wait()
        time.sleep(0.3)
        assert _state(pid) not in (None, "Z")
    finally:
        os.kill(pid, signal.SIGKILL)
