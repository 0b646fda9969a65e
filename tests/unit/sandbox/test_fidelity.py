"""What a process inside a sandbox sees of its own start: signals, limits and `sandbox run` output."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tests.unit.sandbox.conftest import BACKENDS

from inhabit.sandbox.signals import LIBC_RESERVED

SRC = Path(__file__).resolve().parents[3] / "src"
_RUN = [sys.executable, "-m", "inhabit", "sandbox", "run"]

# Run the sandbox from a parent whose own state a careless launcher would pass on: SIGINT and
# SIGHUP ignored (as after `cmd &` in a script, or `nohup`), SIGUSR1 and a realtime signal blocked.
_CHILD = """
import asyncio, signal, sys
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1, signal.SIGRTMIN + 2])
from tests.unit.sandbox.conftest import make_provider

async def main():
    prov = make_provider(sys.argv[1])
    try:
        async with await prov.create(sys.argv[2]) as sb:
            r = await sb.exec(["sh", "-c", "grep -E '^Sig(Ign|Blk)' /proc/self/status"])
            print(r.stdout, r.stderr)
    finally:
        await prov.close()

asyncio.run(main())
"""


@pytest.mark.parametrize("kind", BACKENDS)
def test_sandboxed_processes_start_with_default_signals(kind: str, workspace: Path):
    if kind != "process":
        from inhabit.sandbox import bwrap

        if bwrap.bwrap_problem():
            pytest.skip(f"bwrap unavailable here: {bwrap.bwrap_problem()}")
    root = str(SRC.parent)
    env = {**os.environ, "PYTHONPATH": f"{SRC}{os.pathsep}{root}"}
    out = subprocess.run(
        ["env", "--ignore-signal=INT,HUP,QUIT", sys.executable, "-c", _CHILD, kind, str(workspace)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=root,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    fields = dict(line.split(":") for line in out.stdout.split("\n") if line.startswith("Sig"))
    # Signals 32 and 33 belong to the C library (sigaction refuses them); `make test` starts
    # pytest with both ignored, and nothing a sandboxed program can do sees the difference.
    assert int(fields["SigIgn"], 16) & ~LIBC_RESERVED == 0, out.stdout
    assert int(fields["SigBlk"], 16) & ~LIBC_RESERVED == 0, out.stdout


_INTERLEAVED = """
import sys, time
for i in range(4):
    stream = sys.stdout if i % 2 == 0 else sys.stderr
    stream.write(f"line{i}\\n")
    stream.flush()
    time.sleep(0.05)
"""


@pytest.mark.parametrize("backend", ["process", "bwrap"])
def test_sandbox_run_keeps_stdout_and_stderr_in_order(backend: str, tmp_path: Path):
    if backend == "bwrap":
        from inhabit.sandbox import bwrap

        if bwrap.bwrap_problem():
            pytest.skip(f"bwrap unavailable here: {bwrap.bwrap_problem()}")
    (tmp_path / "a.py").write_text(_INTERLEAVED)
    out = subprocess.run(
        [*_RUN, str(tmp_path), "--backend", backend, "--", "python3", "a.py"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one pipe: what arrives first is written first
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert out.returncode == 0, out.stdout
    lines = [line for line in out.stdout.splitlines() if line.startswith("line")]
    assert lines == ["line0", "line1", "line2", "line3"]


def test_sandbox_run_marks_cut_output(tmp_path: Path):
    (tmp_path / "a.py").write_text("print('x' * 5000); print('done')\n")
    out = subprocess.run(
        [*_RUN, str(tmp_path), "--output-bytes", "1024", "--", "python3", "a.py"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert len(out.stdout) == 1024 and "done" not in out.stdout
    assert "stdout cut at 1024 bytes" in out.stderr
    assert out.returncode == 121  # the command exited 0, but its output was not all shown


async def test_a_process_may_raise_its_own_soft_limits(provider_factory, workspace: Path):
    # CPython's test_resource does this: set RLIMIT_CPU to a million seconds, keep FSIZE's hard max.
    code = (
        "import resource as r\n"
        "soft, hard = r.getrlimit(r.RLIMIT_CPU)\n"
        "r.setrlimit(r.RLIMIT_CPU, (10**6, 10**6))\n"
        "fs, fh = r.getrlimit(r.RLIMIT_FSIZE)\n"
        "r.setrlimit(r.RLIMIT_FSIZE, (fh, fh))\n"
        "print(soft, fh == r.RLIM_INFINITY)\n"
    )
    prov = provider_factory("bwrap", cpu_time_s=7)
    if not prov.tmpfs_volumes:
        pytest.skip("unprivileged, RLIMIT_FSIZE's hard limit is the only per-file bound")
    async with await prov.create(workspace) as sb:
        r = await sb.exec(["python3", "-c", code])
    assert r.exit_code == 0, r.stderr
    assert r.stdout.split() == ["7", "True"]  # the soft limit is still the configured one


async def test_memory_kill_is_named(provider_factory, workspace: Path):
    prov = provider_factory("bwrap", memory_mb=64)
    if prov.cgroups is None:
        pytest.skip("no cgroup here: memory is bounded by RLIMIT_AS (MemoryError, no kill)")
    hog = "x = []\nwhile True:\n    x.append(bytearray(1 << 20))\n"
    async with await prov.create(workspace) as sb:
        r = await sb.exec(["sh", "-c", f"python3 -c '{hog}'; echo after $?"])
        fine = await sb.exec(["true"])
        again = await sb.exec(["python3", "-c", hog])
    assert "after 137" in r.stdout
    assert r.limit_hit.startswith("memory limit:") and "64 MB" in r.limit_hit
    # Each exec names only the kills during its own run: none for the next one, then a new one.
    assert fine.limit_hit == ""
    assert again.exit_code == -9 and again.limit_hit.startswith("memory limit:")


@pytest.mark.parametrize("kind", ["process", "bwrap"])
async def test_time_and_cpu_limits_are_named(provider_factory, workspace: Path, kind: str):
    prov = provider_factory(kind, cpu_time_s=1)
    async with await prov.create(workspace) as sb:
        slow = await sb.exec(["sleep", "30"], timeout_s=0.5)
        spin = await sb.exec(["python3", "-c", "while True: pass"], timeout_s=30)
        fine = await sb.exec(["true"])
    assert slow.timed_out and slow.limit_hit.startswith("time limit:") and "0.5 s" in slow.limit_hit
    assert spin.limit_hit.startswith("CPU time limit:")
    assert fine.limit_hit == ""


async def test_core_dumps_soft_off_hard_as_on_a_login(provider_factory, workspace: Path):
    prov = provider_factory("bwrap")
    async with await prov.create(workspace) as sb:
        r = await sb.exec("ulimit -S -c; ulimit -H -c")
    soft, hard = r.stdout.split()
    assert soft == "0"
    # Hard unlimited where the kernel writes dumps as files; 0 where core_pattern pipes them to a
    # host program (or, unprivileged, whatever hard limit the caller had).
    if prov.core_to_file and prov.launch_as_root:
        assert hard == "unlimited"
    elif not prov.core_to_file:
        assert hard == "0"


async def test_process_limit_is_named(provider_factory, workspace: Path):
    prov = provider_factory("bwrap", max_processes=16)
    if prov.cgroups is None:
        pytest.skip("no pids cgroup here: RLIMIT_NPROC refuses forks without a count to report")
    code = (
        "import subprocess, sys\n"
        "ps = []\n"
        "try:\n"
        "    for _ in range(40):\n"
        "        ps.append(subprocess.Popen(['sleep', '5']))\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
        "    sys.exit(1)\n"
    )
    async with await prov.create(workspace) as sb:
        r = await sb.exec(["python3", "-c", code])
        fine = await sb.exec(["true"])
    assert r.exit_code == 1 and "refused 11" in r.stdout  # EAGAIN
    assert r.limit_hit.startswith("process limit:") and "16 processes" in r.limit_hit
    assert fine.limit_hit == ""


async def test_default_limits_fit_a_hundred_processes(workspace: Path):
    """CPython's test_subprocess starts 100 interpreters at once; the defaults must hold them."""
    from inhabit.sandbox import bwrap
    from inhabit.sandbox.base import SandboxLimits

    if bwrap.bwrap_problem():
        pytest.skip(f"bwrap unavailable here: {bwrap.bwrap_problem()}")
    prov = bwrap.BwrapSandboxProvider(limits=SandboxLimits())
    code = (
        "import subprocess, sys\n"
        "ps = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(2)']) for _ in range(100)]\n"
        "print(sum(p.wait() == 0 for p in ps))\n"
    )
    try:
        async with await prov.create(workspace) as sb:
            r = await sb.exec(["python3", "-c", code], timeout_s=120)
    finally:
        await prov.close()
    assert r.exit_code == 0, (r.stderr[-2000:], r.limit_hit)
    assert r.stdout.strip() == "100"


async def test_sparse_file_past_disk_cap_works_as_root(provider_factory, workspace: Path):
    """As on a machine (CPython's test_mmap writes a byte past 4 GB): only bytes written count,
    bounded by the volume's size, not the file's apparent size."""
    prov = provider_factory("bwrap", disk_mb=32)
    if not prov.tmpfs_volumes:
        pytest.skip("unprivileged, RLIMIT_FSIZE's hard limit is the only per-file bound")
    code = "f = open('big', 'wb'); f.seek(5 * 2**30); f.write(b'x'); f.close(); import os; print(os.path.getsize('big'))"
    async with await prov.create(workspace) as sb:
        r = await sb.exec(["python3", "-c", code])
    assert r.exit_code == 0, (r.stderr, r.limit_hit)
    assert int(r.stdout) == 5 * 2**30 + 1
