"""The sandbox looks like an ordinary machine from inside: the machine profile, and no tells.

The tells probe searches what a curious process reads first (every process's command line and
environment, the mount table, the cgroup file, every file under /etc, its own environment and
host name) for words that would say "this is a sandbox built by inhabit", and checks that the
repository (its working directory) lies under its home.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from inhabit.sandbox.base import WORKSPACE_MOUNT
from inhabit.sandbox.machine import MachineProfile

# Runs inside the sandbox; the words to look for arrive on stdin, so that they are in no
# command line the probe itself searches.
_PROBE = r"""
import json, os, sys
words = json.loads(sys.stdin.read())
found = []

def scan(where, data):
    text = data.decode("utf-8", "replace").lower() if isinstance(data, bytes) else data.lower()
    for w in words:
        if w.lower() in text:
            found.append([where, w])

for pid in os.listdir("/proc"):
    if pid.isdigit():
        for name in ("cmdline", "environ"):
            try:
                with open(f"/proc/{pid}/{name}", "rb") as f:
                    scan(f"/proc/{pid}/{name}", f.read())
            except OSError:
                pass
for name in ("mountinfo", "cgroup", "mounts"):
    with open(f"/proc/self/{name}", "rb") as f:
        scan(f"/proc/self/{name}", f.read())
for root, dirs, files in os.walk("/etc"):
    for n in dirs + files:
        p = os.path.join(root, n)
        scan(p, p)
        if os.path.islink(p):
            scan(p, os.readlink(p))
        elif os.path.isfile(p):
            try:
                with open(p, "rb") as f:
                    scan(p, f.read())
            except OSError:
                pass
for k, v in os.environ.items():
    scan("environment", f"{k}={v}")
scan("hostname", os.uname().nodename)
# A repository outside the user's home (/workspace, /app) is a tell of its own.
home = os.environ.get("HOME", "")
if not os.getcwd().startswith(home.rstrip("/") + "/"):
    found.append(["cwd", f"{os.getcwd()} is not under HOME={home}"])
print(json.dumps(found))
"""


async def _probe(provider, workspace: Path, words: list[str]) -> list[list[str]]:
    (workspace / "probe.py").write_text(_PROBE)
    async with await provider.create(workspace) as sb:
        r = await sb.exec(["python3", "probe.py"], stdin=json.dumps(words).encode(), timeout_s=60)
    assert r.exit_code == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


def _from_host(where: str, word: str) -> bool:
    """Whether a find under /etc is the host's own file shown as it is (e.g. a CA certificate
    named after the host's own proxy): the machine's, not a trace of how the sandbox is built."""
    host = Path(where)
    if not where.startswith("/etc/") or not (host.exists() or host.is_symlink()):
        return False
    text = where + (os.readlink(host) if host.is_symlink() else "")
    if host.is_file():
        text += host.read_bytes().decode("utf-8", "replace")
    return word.lower() in text.lower()


@pytest.mark.parametrize("kind", ["bwrap", "bwrap-copy"])
async def test_no_tells_inside(kind: str, workspace: Path, provider_factory):
    prov = provider_factory(kind)
    found = await _probe(prov, workspace, ["inhabit", "bwrap", "bubblewrap", "sandbox"])
    found = [f for f in found if not _from_host(*f)]
    assert found == [], found


def _as_root(prov) -> None:
    # Unprivileged, nothing may be mounted: binds show their host sources (docs/sandbox.md).
    if not prov.overlay:
        pytest.skip("needs root: the neutral mount table is made of the provider's own mounts")


@pytest.mark.parametrize("kind", ["bwrap", "bwrap-copy"])
async def test_scratch_dir_not_visible_inside(kind: str, workspace: Path, provider_factory):
    prov = provider_factory(kind)
    if kind == "bwrap":
        _as_root(prov)
    elif not prov.tmpfs_volumes:
        pytest.skip("needs root: the neutral mount table is made of the provider's own mounts")
    assert await _probe(prov, workspace, [prov.root.name, str(prov.root)]) == []


async def test_venv_path_not_visible_inside(workspace: Path, provider_factory):
    """The interpreter and the venv show at /opt/python and /opt/venv, not at their host paths,
    and inhabit's own install is hidden from the venv."""
    prov = provider_factory("bwrap")
    _as_root(prov)
    if sys.prefix == sys.base_prefix:
        pytest.skip("not running in a virtual environment")
    words = [str(Path(sys.prefix).resolve()), str(Path(sys.base_prefix).resolve())]
    assert await _probe(prov, workspace, words) == []
    m = MachineProfile()
    async with await prov.create(workspace) as sb:
        r = await sb.exec(
            "python -c 'import sys; print(sys.prefix, sys.base_prefix)'; command -v python; command -v pytest; "
            "python -m pip list 2>/dev/null | grep -ci inhabit; python -c 'import inhabit'"
        )
        # Host paths still run (a caller's sys.executable, built tasks' commands).
        host = await sb.exec([sys.executable, "-c", "import pytest, sys; print(sys.base_prefix)"])
    lines = r.stdout.splitlines()
    assert lines[0] == f"{m.venv_dir} {m.python_dir}"
    assert lines[1:3] == [f"{m.venv_dir}/bin/python", f"{m.venv_dir}/bin/pytest"]
    assert lines[3] == "0"
    assert "No module named 'inhabit'" in r.stderr
    assert host.exit_code == 0, host.stderr
    assert host.stdout.strip() == m.python_dir


@pytest.mark.parametrize("kind", ["bwrap", "bwrap-copy"])
async def test_machine_profile_inside(kind: str, workspace: Path, provider_factory):
    prov = provider_factory(kind)
    m = MachineProfile()
    script = (
        "hostname; id -un; id -u; echo $HOME; pwd -P; cd && pwd; echo $SHELL $LOGNAME $TERM $LANG; "
        "getent passwd $(id -un) | cut -d: -f6,7; stat -c %a /dev/shm ~ /tmp; "
        "grep -c . /etc/os-release; touch ~/.x /dev/shm/x && echo writable; "
        "python3 -c 'import multiprocessing as m; l = m.Lock(); print(\"semaphore\")'; cat /proc/1/cmdline | tr '\\0' ' '"
    )
    async with await prov.create(workspace) as sb:
        r = await sb.exec(script)
        again = await sb.exec("cat ~/.x && echo kept; ls -A ~")
    assert r.exit_code == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[:3] == [m.hostname, m.user, str(m.uid)]
    assert lines[3] == lines[5] == m.home == f"/home/{m.user}"
    # The repository lies in the user's home, where a developer keeps one (the grader uses it too).
    assert lines[4] == WORKSPACE_MOUNT == f"{m.home}/project"
    assert lines[4].startswith(lines[3] + "/")
    assert lines[6] == f"{m.login_shell()} {m.user} xterm-256color C.UTF-8"
    assert lines[7] == f"{m.home}:{m.login_shell()}"
    assert lines[8:11] == ["1777", "755", "1777"]
    assert int(lines[11]) >= 2  # NAME=..., ID=...
    assert lines[12:14] == ["writable", "semaphore"]
    assert lines[14].startswith("/bin/sh -c ")  # PID 1 is a shell, not bwrap with host paths
    assert "kept" in again.stdout  # the home directory persists across a sandbox's commands
    if Path("/etc/ssl/certs/ca-certificates.crt").is_file():
        async with await prov.create(workspace) as sb:
            r = await sb.exec("grep -c 'BEGIN CERTIFICATE' /etc/ssl/certs/ca-certificates.crt")
        assert int(r.stdout) > 10


async def test_profile_is_configurable(workspace: Path):
    from inhabit.sandbox import SandboxConfig, create_provider

    cfg = SandboxConfig(
        backend="bwrap",
        machine={
            "hostname": "laptop",
            "user": "ana",
            "uid": 1001,
            "gid": 1001,
            "extra_env": {"EDITOR": "vi"},
        },
    )
    from inhabit.sandbox import bwrap

    if bwrap.bwrap_problem():
        pytest.skip(f"bwrap unavailable here: {bwrap.bwrap_problem()}")
    prov = create_provider(cfg)
    try:
        async with await prov.create(workspace) as sb:
            r = await sb.exec("echo $(hostname) $(id -un) $(id -u) $(id -g) $HOME $EDITOR")
        assert r.stdout.split() == ["laptop", "ana", "1001", "1001", "/home/ana", "vi"]
    finally:
        await prov.close()


def test_profile_rejects_bad_values():
    from pydantic import ValidationError

    for bad in ({"user": "Bad User"}, {"hostname": "-x"}, {"uid": 0}, {"colour": "red"}):
        with pytest.raises(ValidationError):
            MachineProfile(**bad)


async def test_process_backend_sets_the_login_environment(workspace: Path, provider_factory):
    prov = provider_factory("process")
    async with await prov.create(workspace) as sb:
        r = await sb.exec("echo $USER $LOGNAME $TERM; test -d $HOME && echo home")
    m = MachineProfile()
    assert r.stdout.split() == [m.user, m.user, m.term, "home"]


@pytest.mark.parametrize("kind", ["bwrap", "bwrap-copy"])
async def test_dev_shm_is_size_capped(kind: str, workspace: Path, provider_factory):
    """Without a cgroup nothing else bounds a tmpfs: /dev/shm carries its own size."""
    from inhabit.sandbox.bwrap import SHM_BYTES

    prov = provider_factory(kind)
    async with await prov.create(workspace) as sb:
        r = await sb.exec("df -B1 --output=size /dev/shm | tail -1")
    assert r.exit_code == 0, r.stderr
    assert int(r.stdout) == SHM_BYTES


@pytest.mark.parametrize("kind", ["bwrap", "bwrap-copy"])
async def test_other_users_answer_eperm(kind: str, workspace: Path, provider_factory):
    """With a uid range mapped, chown/setuid to another user fail as on a real machine (EPERM,
    not EINVAL), and the sandbox user still cannot make a user namespace of its own."""
    prov = provider_factory(kind)
    if prov.range_userns_fd is None:
        pytest.skip("a uid range needs root, setpriv, nsenter and a pids cgroup")
    script = r"""
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)

def unshare_user():
    if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
        raise OSError(ctypes.get_errno(), "unshare")

open("f", "w").close()
for name, call in [("chown", lambda: os.chown("f", 1001, -1)), ("chgrp", lambda: os.chown("f", -1, 1001)),
                   ("setreuid", lambda: os.setreuid(1001, 1001)), ("setregid", lambda: os.setregid(1001, 1001)),
                   ("unshare", unshare_user)]:
    try:
        call()
        print(name, "allowed")
    except OSError as e:
        print(name, errno.errorcode[e.errno])
print(sorted(os.listdir("/proc/self/fd")))
"""
    async with await prov.create(workspace) as sb:
        r = await sb.exec(["python3", "-c", script])
    assert r.exit_code == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[:4] == ["chown EPERM", "chgrp EPERM", "setreuid EPERM", "setregid EPERM"]
    assert out[4] in ("unshare ENOSPC", "unshare EPERM")  # nested user namespaces stay off
    assert out[5] == "['0', '1', '2', '3']"  # the namespace's fd does not reach the command


@pytest.mark.parametrize("kind", ["bwrap", "bwrap-copy"])
async def test_sys_topology_readable_root_read_only(kind: str, workspace: Path, provider_factory):
    """Tools that size themselves from /sys (lscpu, `nproc --all`) work; nothing under / or /sys
    can be created or changed, while the user's own places stay writable."""
    prov = provider_factory(kind)
    if not Path("/sys/devices/system/cpu/online").is_file():
        pytest.skip("this host has no /sys/devices/system/cpu")
    script = (
        "cat /sys/devices/system/cpu/online; nproc --all; "
        "for p in /x /sys/x /sys/devices/system/cpu/x /usr/x /etc/x; do touch $p 2>/dev/null && echo $p; done; "
        "touch /home/dev/project/w ~/h /tmp/t /dev/shm/s && echo writable"
    )
    async with await prov.create(workspace) as sb:
        r = await sb.exec(script)
    lines = r.stdout.splitlines()
    assert lines[0] == Path("/sys/devices/system/cpu/online").read_text().strip()
    assert int(lines[1]) == os.cpu_count()
    assert lines[2:] == ["writable"]
