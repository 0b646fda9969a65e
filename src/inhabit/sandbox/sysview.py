"""The minimal read-only view of the host system that bwrap sandboxes see.

Mounted read-only: /usr (with /bin, /lib, /lib64, /sbin as on the host: symlinks into /usr on
merged-/usr systems, read-only binds otherwise), the Python interpreter running inhabit (its
installation prefix, e.g. a pyenv version under /root) and its virtual environment (so the
task's tests and ruff run inside), /opt only if asked. From /etc only what programs need to
start: the dynamic loader's cache and config, alternatives symlinks, timezone, nsswitch, the
host's os-release and CA certificates (/etc/ssl/certs, copied once per provider; never
/etc/ssl/private); plus generated passwd/group/hosts/hostname/resolv.conf files for the machine
profile (`inhabit.sandbox.machine`: its user, home directory and host name).

Deliberately absent: the host's home directories, /root (except the interpreter prefix bound at
its own path), /tmp, /var, /run (no unix sockets of host daemons can be reached), /work, /srv,
/mnt, /media, /sys but for the CPU and NUMA topology (`sys_args`), other sandboxes' scratch, /etc/shadow and the rest of /etc. /proc is a fresh,
read-only procfs of the sandbox's pid namespace; /dev is a minimal tmpfs (null, zero, random...).
The root directory itself is read-only (as on a machine, where / belongs to root): new files go
to the workspace, the home directory, /tmp or /dev/shm.
Python roots the sandbox's host uid cannot reach at their own path (a pyenv under /root) are
bound from a read-only bind the provider makes under its scratch dir.

What this does NOT hide: anything inside the bound trees (e.g. every file under /usr and the
venv is readable, which is what makes them useful) and the kernel itself (uname, /proc/cpuinfo).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from inhabit.sandbox.machine import MachineProfile, system_path

SANDBOX_UID = 1000  # the probe's uid; sandboxes run as their machine profile's uid

_ETC_FILES = (
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "nsswitch.conf",
    "protocols",
    "services",
    "os-release",
    "issue",
    "debian_version",
    "lsb-release",
    "ca-certificates.conf",
    "ssl/certs",
    "ssl/openssl.cnf",
    "skel",
)
_TOP_LINKS_OR_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


def python_roots() -> list[Path]:
    """Directories that hold the running interpreter and its packages (deduplicated)."""
    roots: list[Path] = []
    for p in (sys.base_prefix, sys.prefix, os.path.dirname(os.path.realpath(sys.executable))):
        path = Path(p).resolve()
        if str(path).startswith("/usr/") or str(path) == "/usr":
            continue  # already visible through /usr
        if path.is_dir() and not any(path == r or r in path.parents for r in roots):
            roots = [r for r in roots if path not in r.parents]
            roots.append(path)
    return roots


def write_etc(dest: Path, machine: MachineProfile | None = None) -> Path:
    """Build the sandbox's whole /etc in `dest`: copies of the few host files, plus generated ones.

    One directory bound once is cheaper per exec than a bind per file (each is a mount).
    """
    m = machine or MachineProfile()
    dest.mkdir(parents=True, exist_ok=True)
    for name in _ETC_FILES:
        host = Path("/etc") / name
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        if host.is_symlink():
            (dest / name).symlink_to(os.readlink(host))
        elif host.is_dir():
            shutil.copytree(host, dest / name, symlinks=True)
        elif host.is_file():
            shutil.copy2(host, dest / name)
    shell = m.login_shell()
    passwd = [
        "root:x:0:0:root:/root:/bin/bash" if shell == "/bin/bash" else "root:x:0:0:root:/root:/bin/sh",
        "daemon:x:1:1:daemon:/usr/sbin:/usr/sbin/nologin",
        "bin:x:2:2:bin:/bin:/usr/sbin/nologin",
        "sys:x:3:3:sys:/dev:/usr/sbin/nologin",
        f"{m.user}:x:{m.uid}:{m.gid}:{m.user},,,:{m.home}:{shell}",
        "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
    ]
    group = ["root:x:0:", "daemon:x:1:", "bin:x:2:", "sys:x:3:", "adm:x:4:", "tty:x:5:"]
    group += [f"{m.user}:x:{m.gid}:", "users:x:100:", "nogroup:x:65534:"]
    files = {
        "passwd": "\n".join(passwd) + "\n",
        "group": "\n".join(group) + "\n",
        "hosts": f"127.0.0.1\tlocalhost\n127.0.1.1\t{m.hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n",
        "hostname": f"{m.hostname}\n",
        # What glibc assumes without the file anyway; there is no network beyond loopback.
        "resolv.conf": "nameserver 127.0.0.1\n",
    }
    for name, text in files.items():
        p = dest / name
        p.write_text(text)
        p.chmod(0o644)
    dest.chmod(0o755)
    return dest


def bwrap_args(etc_dir: Path, machine: MachineProfile | None = None) -> list[str]:
    """bwrap arguments for the read-only system view (everything but workspace, /tmp, /proc, /dev
    and the Python roots, which `python_bind_args` binds last).
    """
    args = ["--ro-bind", "/usr", "/usr"]
    for name in _TOP_LINKS_OR_DIRS:
        host = Path("/") / name
        if host.is_symlink():
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            args += ["--ro-bind", str(host), f"/{name}"]
    args += ["--ro-bind", str(write_etc(etc_dir, machine)), "/etc"]
    return args


# The parts of /sys that programs read to size themselves (lscpu, psutil, numpy's and torch's
# thread pools, `nproc --all`): CPU and NUMA topology, read-only. Nothing else of /sys (devices,
# kernel knobs, the host's cgroup tree) is shown.
_SYS_PARTS = ("devices/system/cpu", "devices/system/node")


def sys_parts() -> list[Path]:
    """The `_SYS_PARTS` that exist here."""
    return [Path("/sys") / part for part in _SYS_PARTS if (Path("/sys") / part).is_dir()]


def sys_args() -> list[str]:
    """Read-only binds of `_SYS_PARTS` that exist here."""
    args: list[str] = []
    for host in sys_parts():
        args += ["--ro-bind", str(host), str(host)]
    return args


def venv_home(venv: Path) -> Path | None:
    """The `home` (the base interpreter's bin directory) a venv's pyvenv.cfg names, or None."""
    cfg = venv / "pyvenv.cfg"
    if not cfg.is_file():
        return None
    for line in cfg.read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            return Path(value.strip())
    return None


def venv_version(venv: Path) -> str:
    """`major.minor` of a venv's interpreter, from its pyvenv.cfg ('' when it names none)."""
    for line in (venv / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() in ("version", "version_info"):
            return ".".join(value.strip().split(".")[:2])
    return ""


def python_bind_args(sources: dict[Path, Path] | None = None) -> list[str]:
    """Read-only binds of the Python roots at their own paths.

    They must come after the sandbox's private /tmp (and workspace) binds: a venv that lives under
    the host's /tmp (a CI checkout there, say) would otherwise be hidden by the later /tmp mount.
    """
    sources = sources or {}
    args: list[str] = []
    for root in python_roots():
        args += ["--ro-bind", str(sources.get(root, root)), str(root)]
    return args


def sandbox_path_env() -> str:
    """PATH inside the sandbox: the venv's bin first (python, pytest, ruff), then the system."""
    venv_bin = Path(sys.prefix).resolve() / "bin"
    return system_path([str(venv_bin)] if venv_bin.is_dir() else [])
