"""The same attacks as test_bwrap_hostile.py, but with inhabit itself running as an unprivileged user.

Unprivileged, the bwrap backend cannot mount (workspace_mode falls back to copy) nor write
cgroups (limits fall back to rlimits, where RLIMIT_NPROC binds per user namespace). The attacks
run once in a child process as uid 65534 (the system Python with the venv's packages on its
path, since the venv's interpreter may sit under a /root the user cannot enter); each test below
checks one property of what it reported.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).parents[3] / "src"
SYSTEM_PY = "/usr/bin/python3.11"

_SCRIPT = r"""
import asyncio, json, os, sys, tempfile, time
from pathlib import Path
from inhabit.sandbox import SandboxLimits
from inhabit.sandbox.bwrap import BwrapSandboxProvider

secret_file, port, tag = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def procs_with(marker):
    n = 0
    for e in os.listdir("/proc"):
        try:
            if e.isdigit() and marker.encode() in open(f"/proc/{e}/cmdline", "rb").read():
                if open(f"/proc/{e}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
                    n += 1
        except OSError:
            pass
    return n

async def main():
    out = {"uid": os.getuid()}
    ws = Path(tempfile.mkdtemp(dir="/dev/shm"))
    (ws / "a.txt").write_text("hello\n")
    prov = BwrapSandboxProvider(limits=SandboxLimits(memory_mb=256, max_processes=32, output_bytes=4096))
    out["describe"] = prov.describe()
    sb = await prov.create(ws)
    other = await prov.create(ws)
    r = await sb.exec(f"id -u; echo x > {Path(secret_file).parent}/pwn-{tag}; echo y > /tmp/pwn-{tag}; cat a.txt")
    out["exec"] = r.stdout
    out["write_escaped"] = os.path.exists(f"{Path(secret_file).parent}/pwn-{tag}") or os.path.exists(f"/tmp/pwn-{tag}")
    r = await sb.exec(f"cat {secret_file}; ls /dev/shm")
    out["read_output"] = r.stdout + r.stderr
    r = await sb.exec(["python3", "-c", f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), timeout=2); print('CONNECTED')\nexcept OSError as e: print('refused', e)"])
    out["net"] = r.stdout
    bomb = f"import os, time  # bomb{tag}\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(0.01)\n"
    task = asyncio.ensure_future(sb.exec(["python3", "-c", bomb], timeout_s=3))
    await asyncio.sleep(1.0)
    out["bomb_procs"] = procs_with(f"bomb{tag}")
    out["other_during_bomb"] = (await other.exec("echo fine")).stdout
    out["bomb_timed_out"] = (await task).timed_out
    time.sleep(0.2)
    out["bomb_left"] = procs_with(f"bomb{tag}")
    r = await sb.exec(["python3", "-c", "x = b'x' * (1 << 30); print('allocated')"])
    out["hog"] = [r.exit_code, r.stdout, r.stderr[-200:]]
    r = await sb.exec(f"sleep 97{tag} & sleep 97{tag}", timeout_s=1)
    out["timeout"] = r.timed_out
    time.sleep(0.2)
    out["timeout_left"] = procs_with(f"97{tag}")
    r = await sb.exec("yes", timeout_s=1)
    out["flood"] = [len(r.stdout), r.stdout_truncated]
    task = asyncio.ensure_future(sb.exec(f"sleep 98{tag}"))
    await asyncio.sleep(0.5)
    out["close_running"] = procs_with(f"98{tag}")
    await prov.close()
    await task
    time.sleep(0.2)
    out["close_left"] = procs_with(f"98{tag}")
    out["root_left"] = prov.root.exists()
    print(json.dumps(out))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    if os.geteuid() != 0 or not shutil.which("setpriv") or not Path(SYSTEM_PY).exists():
        pytest.skip("needs root (to drop to uid 65534), setpriv and /usr/bin/python3.11")
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{SRC}:{site}", "HOME": "/nonexistent"}
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", SYSTEM_PY, "-c"]
    probe = subprocess.run(
        [*drop, "from inhabit.sandbox.bwrap import bwrap_problem as p; print(p())"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if probe.returncode != 0 or probe.stdout.strip() != "None":
        pytest.skip(
            f"uid 65534 cannot import inhabit or run bwrap here: {(probe.stdout + probe.stderr)[-300:]}"
        )
    secret_dir = Path("/dev/shm") / f"inhabit-secret-{secrets.token_hex(4)}"
    secret_dir.mkdir(mode=0o777)
    os.chmod(secret_dir, 0o777)
    secret = "SECRET-" + secrets.token_hex(8)
    (secret_dir / "s.txt").write_text(secret)
    os.chmod(secret_dir / "s.txt", 0o644)  # readable by the unprivileged user on the host
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(4)
    listener.setblocking(False)
    tag = str(secrets.randbelow(10**6))
    try:
        proc = subprocess.run(
            [
                *drop,
                _SCRIPT,
                str(secret_dir / "s.txt"),
                str(listener.getsockname()[1]),
                tag,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        try:
            listener.accept()
            data["accepted"] = True
        except BlockingIOError:
            data["accepted"] = False
        data["secret"] = secret
        return data
    finally:
        listener.close()
        shutil.rmtree(secret_dir, ignore_errors=True)


def test_runs_unprivileged_with_fallbacks(report):
    assert report["uid"] == 65534
    assert "workspace=copy" in report["describe"] and "rlimits" in report["describe"]
    assert report["exec"] == "1000\nhello\n"


def test_no_write_outside_workspace(report):
    assert report["write_escaped"] is False


def test_no_read_of_host_files(report):
    assert report["secret"] not in report["read_output"]


def test_no_tcp_to_host_loopback(report):
    assert "CONNECTED" not in report["net"] and report["accepted"] is False


def test_fork_bomb_bounded_and_others_work(report):
    assert 4 <= report["bomb_procs"] <= 40  # RLIMIT_NPROC per user namespace (+ bwrap's own)
    assert report["other_during_bomb"] == "fine\n"
    assert report["bomb_timed_out"] and report["bomb_left"] == 0


def test_memory_hog_stopped(report):
    code, stdout, stderr = report["hog"]
    assert code != 0 and "allocated" not in stdout and "MemoryError" in stderr


def test_timeout_kills_children(report):
    assert report["timeout"] and report["timeout_left"] == 0


def test_output_flood_capped(report):
    assert report["flood"] == [4096, True]


def test_close_leaves_nothing(report):
    assert report["close_running"] >= 1
    assert report["close_left"] == 0 and report["root_left"] is False
