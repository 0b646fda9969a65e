"""Shared parts of the load and fault benchmarks (serve_load.py, envserver_load.py).

A `Phase` collects outcomes of requests (ok, or an error kind: an HTTP status, "reset" for a
connection dropped or refused, "hang" for no answer within the client's limit), their
latencies and the server's RSS at its start and end. `leftovers()` snapshots what a server can
leave on the host (processes carrying a marker, inhabit mounts, scratch directories, cgroups);
the difference of two snapshots is what a shutdown left behind. `report()` prints the one table
and writes the JSON.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

SRC = Path(__file__).resolve().parents[1] / "src"
RESULTS = Path(__file__).resolve().parent / "results"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float | None:
    """Resident set size of `pid` in MiB (None once it exited)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def start(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    """`python -m inhabit ARGV` in its own process (as deployed), output to `log`."""
    full_env = {**os.environ, **env, "PYTHONPATH": str(SRC)}
    with log.open("w") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "inhabit", *argv], env=full_env, stdout=out, stderr=out
        )


def wait_ready(
    url: str, proc: subprocess.Popen, headers: dict[str, str] | None = None, timeout_s: float = 300
) -> float:
    """Seconds until `url` answers 200 (raises if the process exits or the time runs out)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited early with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, headers=headers or {}, timeout=2).status_code == 200:
                return time.monotonic() - t0
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s} s")


@dataclass
class Phase:
    name: str
    pid: int
    outcomes: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    rss_start: float | None = None
    rss_end: float | None = None
    notes: dict[str, Any] = field(default_factory=dict)
    t0: float = 0.0
    seconds: float = 0.0

    def __enter__(self) -> Phase:
        self.rss_start, self.t0 = rss_mb(self.pid), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.rss_end, self.seconds = rss_mb(self.pid), time.monotonic() - self.t0

    def record(self, outcome: str, latency_s: float | None = None) -> None:
        self.outcomes[outcome] += 1
        if latency_s is not None and outcome == "ok":
            self.latencies.append(latency_s)

    def record_error(self, e: BaseException) -> None:
        self.record(error_kind(e))

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)

        def pct(p: float) -> float | None:
            return round(lat[min(len(lat) - 1, int(p * len(lat)))], 4) if lat else None

        errors = {k: v for k, v in self.outcomes.items() if k != "ok"}
        return {
            "phase": self.name,
            "seconds": round(self.seconds, 2),
            "requests": sum(self.outcomes.values()),
            "ok": self.outcomes.get("ok", 0),
            "errors": errors,
            "p50_s": pct(0.5),
            "p99_s": pct(0.99),
            "rss_start_mb": None if self.rss_start is None else round(self.rss_start, 1),
            "rss_end_mb": None if self.rss_end is None else round(self.rss_end, 1),
            **self.notes,
        }


def error_kind(e: BaseException) -> str:
    if isinstance(e, httpx.HTTPStatusError):
        return str(e.response.status_code)
    if isinstance(e, httpx.TimeoutException | TimeoutError):
        return "hang"
    if isinstance(e, httpx.TransportError):
        return "reset"
    status = getattr(e, "status_code", None)
    if isinstance(status, int):  # openai SDK errors
        return str(status)
    return type(e).__name__


# ---- what a server leaves on the host ---------------------------------------------------------


def leftovers(marker: str | None = None, pid: int | None = None) -> dict[str, list[str]]:
    """Processes whose command line holds `marker`, and the inhabit mounts, scratch directories
    and cgroups of server process `pid` (their names carry it; others' runs on a shared machine
    do not count)."""
    procs = []
    if marker:
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                with contextlib.suppress(OSError):
                    if marker in (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                        procs.append(d.name)
    tags = (f"ihbw-{pid}-", f"inhabit-env-server-{pid}-") if pid else ("ihbw-", "inhabit-env-server-")
    mounts = []
    with contextlib.suppress(OSError):
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
        mounts = [ln.split()[4] for ln in lines if any(t in ln for t in tags)]
    dirs = []
    for base in (Path("/dev/shm"), Path("/tmp")):
        with contextlib.suppress(OSError):
            dirs += [str(p) for p in base.iterdir() if p.name.startswith(tags)]
    groups = []
    cg = Path("/sys/fs/cgroup")
    with contextlib.suppress(OSError):
        for p in cg.rglob(f"inhabit-{pid}" if pid else "inhabit-*"):
            if p.is_dir() and len(p.relative_to(cg).parts) <= 3:
                groups.append(str(p))
    return {"processes": procs, "mounts": mounts, "directories": dirs, "cgroups": groups}


def new_since(before: dict[str, list[str]], after: dict[str, list[str]]) -> dict[str, list[str]]:
    return {k: sorted(set(after[k]) - set(before[k])) for k in after}


# ---- the one table ----------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpus": os.cpu_count(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "python": platform.python_version(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }


def report(title: str, phases: list[dict[str, Any]], extra: dict[str, Any], out: Path) -> None:
    table = Table(title=title)
    for col in (
        "phase",
        "s",
        "requests",
        "ok",
        "errors by kind",
        "p50 s",
        "p99 s",
        "RSS MiB start/end",
        "notes",
    ):
        table.add_column(col)
    for p in phases:
        skip = {
            "phase",
            "seconds",
            "requests",
            "ok",
            "errors",
            "p50_s",
            "p99_s",
            "rss_start_mb",
            "rss_end_mb",
        }
        notes = ", ".join(f"{k}={v}" for k, v in p.items() if k not in skip)
        errors = ", ".join(f"{k}:{v}" for k, v in sorted(p["errors"].items())) or "0"
        table.add_row(
            p["phase"], str(p["seconds"]), str(p["requests"]), str(p["ok"]), errors,
            str(p["p50_s"]), str(p["p99_s"]), f"{p['rss_start_mb']} / {p['rss_end_mb']}", notes,
        )  # fmt: skip
    console = Console(width=200)
    console.print(table)
    for k, v in extra.items():
        console.print(f"{k}: {v}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"phases": phases, **extra, "machine": machine()}, indent=2))
    console.print(f"wrote {out}")
