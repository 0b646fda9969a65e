"""Benchmark: do real test suites behave the same in a bwrap sandbox as on the host?

Runs OS-facing CPython regression modules (from the interpreter's own `test` package) and real
library test suites twice: on the host as an unprivileged user (uid 65534, `nobody`, so that
root-only behaviour is not counted against the sandbox) and in a bwrap sandbox (the default
provider and machine profile). Per-test outcomes come from JUnit XML on both sides
(`python -m test --junit-xml`, `pytest --junitxml`). Prints per module passed / failed / errors /
skipped on each side and every test whose outcome differs, with the failing side's message;
differences listed in DELIBERATE are expected (each with its reason) and do not count against
the goal. Writes bench/results/fidelity.json.

Needs root (the sandbox's full profile, and dropping to uid 65534 for the host side). The host
side runs in a private mount namespace where only the Python install is made reachable for that
user (a pyenv under /root is not), nothing else changed.

    PYTHONPATH=src .venv/bin/python bench/fidelity.py                # quick set (a few minutes)
    PYTHONPATH=src .venv/bin/python bench/fidelity.py --full         # every module below
    PYTHONPATH=src .venv/bin/python bench/fidelity.py --modules test_os,joblib.test.test_disk
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.sandbox import SandboxLimits
from inhabit.sandbox.bwrap import BwrapSandboxProvider, bwrap_problem
from inhabit.sandbox.hostfs import world_traversable
from inhabit.sandbox.machine import system_path
from inhabit.sandbox.sysview import python_roots

# CPython's OS-facing regression modules: quick ones first, the rest with --full.
CPYTHON_QUICK = [
    "test_os", "test_posix", "test_pwd", "test_grp", "test_resource", "test_tempfile",
    "test_shutil", "test_signal", "test_getpass", "test_platform", "test_fcntl", "test_select",
]  # fmt: skip
CPYTHON_FULL = [
    *CPYTHON_QUICK,
    "test_subprocess", "test_socket", "test_threading", "test_pty", "test_mmap", "test_glob",
    "test_pathlib", "test_posixpath", "test_fileio", "test_selectors", "test_sysconfig",
    "test_site", "test_venv", "test_multiprocessing_forkserver",
]  # fmt: skip
# Real library suites installed in the venv with their tests (pytest --pyargs).
LIBS_QUICK = ["joblib.test.test_disk", "joblib.test.test_memory", "networkx.tests"]
LIBS_FULL = ["joblib.test", "networkx.tests", "jsonschema.tests.test_validators", "jsonschema.tests.test_cli"]

# Differences expected by design: (regex on the test id, why).
DELIBERATE: list[tuple[str, str]] = [
    (r"(network|urlopen|getaddrinfo.*(?i:www|python\.org))", "no network beyond loopback"),
]

HOST_UID = 65534  # nobody: a real unprivileged account every Linux has
_OUTCOMES = ("passed", "failed", "error", "skipped")


def suite_command(module: str, xml: str, python: str) -> list[str]:
    if module.startswith("test_"):
        return [python, "-m", "test", "--junit-xml", xml, module]
    return [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--pyargs", module, "--junitxml", xml]


def available(module: str) -> str | None:
    """None when `module` can run here, else why not."""
    name = f"test.{module}" if module.startswith("test_") else module
    try:
        if importlib.util.find_spec(name) is None:
            raise ImportError
    except ImportError:
        if module.startswith("test_"):
            return "this Python install has no `test` package (e.g. Debian without python3-testsuite)"
        return f"{module} is not installed"
    return None


def parse_junit(data: bytes) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, message of a failure/error/skip)."""
    out: dict[str, tuple[str, str]] = {}
    for tc in ET.fromstring(data).iter("testcase"):
        name = tc.get("name", "")
        cls = tc.get("classname")
        tid = f"{cls}::{name}" if cls else name
        outcome, msg = "passed", ""
        for child in tc:
            if child.tag in ("failure", "error", "skipped"):
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[child.tag]
                text = (child.text or "").strip()
                msg = (child.get("message") or (text.splitlines()[-1] if text else ""))[:240]
                break
        if tc.get("result") == "skipped" or tc.get("status") == "skipped":
            outcome = "skipped"
        out[tid] = (outcome, msg)
    return out


def _host_script(tmp: Path) -> str:
    """Shell lines (run as root in a private mount namespace) that make the Python roots
    reachable for the unprivileged user without changing anything else."""
    lines, restore = [], []
    for i, root in enumerate(python_roots()):
        if world_traversable(root):
            continue
        blocker = next(p for p in [*reversed(root.parents), root] if not os.stat(p).st_mode & 0o001)
        stash = tmp / f"stash{i}"
        stash.mkdir()
        lines.append(f"mount --bind {shlex.quote(str(root))} {shlex.quote(str(stash))}")
        restore.append(f"mount -t tmpfs -o mode=755 tmpfs {shlex.quote(str(blocker))} 2>/dev/null || true")
        restore.append(f"mkdir -p {shlex.quote(str(root))}")
        restore.append(f"mount --bind {shlex.quote(str(stash))} {shlex.quote(str(root))}")
    return "\n".join(lines + restore)


def run_host(module: str, tmp: Path, timeout: float) -> dict:
    # A plain directory name: some tests derive names from the cwd's path (joblib's memory cache).
    work = tmp / f"h{len(list(tmp.iterdir()))}" / "workspace"
    (work / "home").mkdir(parents=True)
    for d in (work.parent, work, work / "home"):
        os.chown(d, HOST_UID, HOST_UID)
    xml = work / "junit.xml"
    venv_bin = str(Path(sys.prefix) / "bin")
    env = {
        "HOME": str(work / "home"), "USER": "nobody", "LOGNAME": "nobody", "SHELL": "/bin/sh",
        "TERM": "xterm-256color", "LANG": "C.UTF-8", "PATH": system_path([venv_bin]),
        "PYTHONDONTWRITEBYTECODE": "1",
    }  # fmt: skip
    inner = [
        "setpriv", f"--reuid={HOST_UID}", f"--regid={HOST_UID}", "--clear-groups", "--",
        "env", "-i", *(f"{k}={v}" for k, v in env.items()),
        *suite_command(module, str(xml), sys.executable),
    ]  # fmt: skip
    script = _host_script(work) + f"\ncd {shlex.quote(str(work))} && exec " + shlex.join(inner)
    t0 = time.monotonic()
    try:
        p = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            capture_output=True, timeout=timeout, check=False,
        )  # fmt: skip
        rc, tail = p.returncode, (p.stdout + p.stderr)[-1500:].decode(errors="replace")
    except subprocess.TimeoutExpired:
        rc, tail = 124, "timed out"
    return _report(xml.read_bytes() if xml.is_file() else None, rc, tail, time.monotonic() - t0)


async def run_sandbox(provider: BwrapSandboxProvider, module: str, tmp: Path, timeout: float) -> dict:
    ws = tmp / f"s{len(list(tmp.iterdir()))}"
    ws.mkdir()
    t0 = time.monotonic()
    async with await provider.create(ws) as sb:
        r = await sb.exec(suite_command(module, "junit.xml", "python"), timeout_s=timeout)
        try:
            data: bytes | None = await sb.read_file("junit.xml")
        except (FileNotFoundError, OSError):
            data = None
    tail = (r.stdout + r.stderr)[-1500:] + (f"\n[limit] {r.limit_hit}" if r.limit_hit else "")
    return _report(data, r.exit_code, tail, time.monotonic() - t0)


def _report(xml: bytes | None, rc: int, tail: str, seconds: float) -> dict:
    tests = parse_junit(xml) if xml else {}
    counts = {o: sum(1 for v in tests.values() if v[0] == o) for o in _OUTCOMES}
    return {"rc": rc, "seconds": round(seconds, 1), "counts": counts, "tests": tests,
            "tail": tail}  # fmt: skip


def _counts(r: dict) -> str:
    return "/".join(str(r["counts"][o]) for o in _OUTCOMES) if r["tests"] else f"no report (rc {r['rc']})"


def deliberate(tid: str) -> str | None:
    for pattern, why in DELIBERATE:
        if re.search(pattern, tid):
            return why
    return None


def compare(host: dict, box: dict) -> list[dict]:
    diffs = []
    for tid in sorted(set(host["tests"]) | set(box["tests"])):
        h = host["tests"].get(tid, ("absent", ""))
        b = box["tests"].get(tid, ("absent", ""))
        if h[0] != b[0]:
            cause = b[1] if b[0] in ("failed", "error", "skipped", "absent") else h[1]
            diffs.append({"test": tid, "host": h[0], "sandbox": b[0], "cause": cause,
                          "deliberate": deliberate(tid)})  # fmt: skip
    return diffs


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", default="", help="comma-separated modules (CPython test_* or packages)")
    ap.add_argument("--full", action="store_true", help="every module listed in this file")
    ap.add_argument("--timeout", type=float, default=1200.0, help="seconds per module and side")
    ap.add_argument("--out", default="bench/results/fidelity.json")
    args = ap.parse_args()
    console = Console(width=120)
    if os.geteuid() != 0 or bwrap_problem() or not shutil.which("setpriv") or not shutil.which("unshare"):
        sys.exit("bench/fidelity.py needs root, setpriv, unshare and working bwrap sandboxes")
    if args.modules:
        modules = [m.strip() for m in args.modules.split(",") if m.strip()]
    else:
        modules = CPYTHON_FULL + LIBS_FULL if args.full else CPYTHON_QUICK + LIBS_QUICK
    provider = BwrapSandboxProvider(limits=SandboxLimits(max_timeout_s=max(args.timeout, 60)))
    results: dict[str, dict] = {}
    started = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="fidelity-"))
    os.chmod(tmp, 0o755)
    try:
        for module in modules:
            why = available(module)
            if why:
                results[module] = {"skipped": why}
                console.print(f"[yellow]skip[/] {module}: {why}")
                continue
            console.print(f"[bold]{module}[/]: host as uid {HOST_UID} ...", end=" ")
            host = await asyncio.to_thread(run_host, module, tmp, args.timeout)
            console.print(f"{host['seconds']} s; sandbox ...", end=" ")
            box = await run_sandbox(provider, module, tmp, args.timeout)
            console.print(f"{box['seconds']} s")
            results[module] = {"host": host, "sandbox": box, "diffs": compare(host, box)}
    finally:
        await provider.close()
        shutil.rmtree(tmp, ignore_errors=True)
    total_s = time.monotonic() - started

    table = Table(
        title=f"fidelity: host as uid {HOST_UID} vs bwrap sandbox (p/f/e/s = passed/failed/errors/skipped)"
    )
    for col in ("module", "host p/f/e/s", "sandbox p/f/e/s", "differing", "deliberate"):
        table.add_column(col, justify="left" if col == "module" else "right", no_wrap=True)
    unexplained = 0
    for module, res in results.items():
        if "skipped" in res:
            table.add_row(module, "skipped", "skipped", "", "")
            continue
        n_del = sum(1 for d in res["diffs"] if d["deliberate"])
        unexplained += len(res["diffs"]) - n_del
        if not res["host"]["tests"] or not res["sandbox"]["tests"]:
            unexplained += 1
        table.add_row(
            module, _counts(res["host"]), _counts(res["sandbox"]), str(len(res["diffs"])), str(n_del)
        )
    console.print(table)
    for module, res in results.items():
        for side in ("host", "sandbox"):
            if "skipped" not in res and not res[side]["tests"]:
                console.print(
                    f"[red]{module} {side}: no JUnit report[/] (rc {res[side]['rc']}):\n{res[side]['tail']}"
                )
        for d in res.get("diffs", []):
            tag = f"deliberate: {d['deliberate']}" if d["deliberate"] else "UNEXPLAINED"
            console.print(f"  {d['test']}: host {d['host']}, sandbox {d['sandbox']} [{tag}] {d['cause']}")
    goal = unexplained == 0
    console.print(f"{'met' if goal else 'NOT met'}  no differing test but deliberate ones "
                  f"({unexplained} unexplained); {total_s:.0f} s in all")  # fmt: skip
    out = {
        "command": "PYTHONPATH=src .venv/bin/python bench/fidelity.py " + " ".join(sys.argv[1:]),
        "host_uid": HOST_UID,
        "sandbox": provider.describe(),
        "seconds": round(total_s, 1),
        "goal_met": goal,
        "deliberate": [{"pattern": p, "why": w} for p, w in DELIBERATE],
        "modules": {
            m: r if "skipped" in r else {
                "host": {k: v for k, v in r["host"].items() if k != "tests"},
                "sandbox": {k: v for k, v in r["sandbox"].items() if k != "tests"},
                "diffs": r["diffs"],
            }
            for m, r in results.items()
        },
    }  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    asyncio.run(main())
