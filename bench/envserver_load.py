"""Load and fault benchmark of `inhabit sandbox env-server`: steady, overload, abandoned clients, hostile
inputs, an optional soak, and a shutdown with work in flight, against a server this script starts
on 127.0.0.1 (its own process, as deployed).

    PYTHONPATH=src .venv/bin/python bench/envserver_load.py --quick
    PYTHONPATH=src .venv/bin/python bench/envserver_load.py --backend bwrap --soak-seconds 600

Goals (issue 22): steady 0 errors; overload sheds with 429 only; a killed client's execs die
within ~2 s and its sandboxes within the lease; hostile requests get 4xx only; RSS growth < 5%
over a 10-minute soak; SIGTERM answers work in flight with 503 `shutting_down` and leaves 0
processes, mounts, directories or cgroups. Every phase is bounded in time. Prints one table and
writes bench/results/envserver_load.json. Timings on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from inhabit.sandbox.backends import SANDBOX_BACKENDS
from loadkit import RESULTS, SRC, Phase, free_port, leftovers, new_since, report, start, wait_ready

TOKEN = "load-bench-token-1"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
LONG = "sleep 31.37"  # every long exec of this bench: the marker that finds leftover processes


def kind(e: BaseException) -> str:
    from inhabit.errors import SandboxLimitExceeded, SandboxNotFound
    from inhabit.sandbox.remote import EnvServerLost

    if isinstance(e, EnvServerLost):
        return "503-shutting_down" if "shutting down" in str(e) else "lost"
    if isinstance(e, SandboxLimitExceeded):
        return "429"
    if isinstance(e, SandboxNotFound):
        return "404"
    return type(e).__name__


async def cycle(prov, phase: Phase, hold_s: float = 0.0) -> None:
    """create -> exec -> write -> read -> close, one outcome."""
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(60):
            sb = await prov.create("server:ws")
            try:
                r = await sb.exec("echo hi")
                assert r.stdout == "hi\n", r
                await sb.write_file("notes.txt", b"x" * 4096)
                assert len(await sb.read_file("notes.txt")) == 4096
                if hold_s:
                    await asyncio.sleep(hold_s)
            finally:
                await sb.close()
        phase.record("ok", time.monotonic() - t0)
    except TimeoutError:
        phase.record("hang")
    except Exception as e:
        phase.record(kind(e))


async def clients(url: str, phase: Phase, n: int, seconds: float, hold_s: float = 0.0) -> None:
    from inhabit.sandbox.remote import RemoteSandboxProvider

    prov = RemoteSandboxProvider(url, TOKEN)
    stop = time.monotonic() + seconds

    async def one() -> None:
        while time.monotonic() < stop:
            await cycle(prov, phase, hold_s)

    await asyncio.gather(*(one() for _ in range(n)))
    await prov.close()


KILLED_CLIENT = f"""
import asyncio, sys
from inhabit.sandbox.remote import RemoteSandboxProvider
async def main():
    prov = RemoteSandboxProvider(sys.argv[1], "{TOKEN}")
    sbs = [await prov.create("server:ws") for _ in range(int(sys.argv[2]))]
    print("ready", flush=True)
    await asyncio.gather(*(sb.exec("{LONG}", timeout_s=300) for sb in sbs))
asyncio.run(main())
"""


async def count(url: str) -> int:
    async with httpx.AsyncClient(timeout=10) as c:
        return len((await c.get(url + "/v1/sandboxes", headers=AUTH)).json())


async def abandoned(url: str, phase: Phase, n: int) -> None:
    before = set(leftovers(LONG)["processes"])
    client = subprocess.Popen(
        [sys.executable, "-c", KILLED_CLIENT, url, str(n)],
        stdout=subprocess.PIPE,
        env=os.environ | {"PYTHONPATH": str(SRC)},
    )
    assert client.stdout is not None and client.stdout.readline().strip() == b"ready"
    deadline = time.monotonic() + 60
    while len(set(leftovers(LONG)["processes"]) - before) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    client.kill()  # SIGKILL: no close, no goodbye
    client.wait()
    t0 = time.monotonic()
    killed_s = reaped_s = None
    while time.monotonic() - t0 < 120 and (killed_s is None or reaped_s is None):
        if killed_s is None and not set(leftovers(LONG)["processes"]) - before:
            killed_s = round(time.monotonic() - t0, 2)
        if reaped_s is None and await count(url) == 0:
            reaped_s = round(time.monotonic() - t0, 2)
        await asyncio.sleep(0.05)
    phase.record("ok" if killed_s is not None and reaped_s is not None else "hang")
    phase.notes |= {"execs": n, "execs_killed_s": killed_s, "sandboxes_reaped_s": reaped_s}


async def hostile(url: str, phase: Phase) -> None:
    big = b"x" * (3 * 1024 * 1024)
    probes: list[tuple[str, str, dict]] = [
        ("GET", "/v1/sandboxes", {"headers": {"Authorization": "Bearer wrong-token-xyz"}}),
        ("GET", "/v1/sandboxes", {"headers": {}}),
        (
            "POST",
            "/v1/sandboxes",
            {"content": b'{"directory": "ws"', "headers": AUTH | {"content-type": "application/json"}},
        ),
        ("POST", "/v1/sandboxes", {"json": {"directory": "../../etc"}, "headers": AUTH}),
        ("POST", "/v1/sandboxes", {"json": {"snapshot_id": "/etc"}, "headers": AUTH}),
        (
            "POST",
            "/v1/sandboxes",
            {"json": {"directory": "ws", "limits": {"memory_mb": -1}}, "headers": AUTH},
        ),
        ("POST", "/v1/sandboxes/upload", {"content": b"not a tarball", "headers": AUTH}),
        ("POST", "/v1/sandboxes/upload", {"content": b"\x1f\x8b" + big, "headers": AUTH}),
        ("POST", "/v1/sandboxes/sb_nope/exec", {"json": {"command": "true"}, "headers": AUTH}),
        ("GET", "/v1/sandboxes/sb_nope/files?path=a%ED%A0%80b", {"headers": AUTH}),
        ("DELETE", "/v1/sandboxes/%00", {"headers": AUTH}),
    ]
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:
        sid = (await c.post("/v1/sandboxes", json={"directory": "ws"}, headers=AUTH)).json()["sandbox_id"]
        probes += [
            (
                "GET",
                f"/v1/sandboxes/{sid}/files",
                {"params": {"path": "../../../etc/passwd"}, "headers": AUTH},
            ),
            ("GET", f"/v1/sandboxes/{sid}/files", {"params": {"path": "a\x00b"}, "headers": AUTH}),
            (
                "PUT",
                f"/v1/sandboxes/{sid}/files",
                {"params": {"path": "f"}, "content": big * 2, "headers": AUTH},
            ),
            ("POST", f"/v1/sandboxes/{sid}/exec", {"json": {"command": [], "cwd": "/etc"}, "headers": AUTH}),
            (
                "POST",
                f"/v1/sandboxes/{sid}/exec",
                {"json": {"command": "true", "stdin_b64": "!!"}, "headers": AUTH},
            ),
            ("POST", f"/v1/sandboxes/{sid}/restore", {"json": {"snapshot_id": "snap_x"}, "headers": AUTH}),
        ]
        for method, path, kw in probes:
            try:
                r = await c.request(method, path, **kw)
                json_ok = r.headers.get("content-type", "").startswith("application/json")
                phase.record(str(r.status_code) if json_ok else f"{r.status_code}-not-json")
            except httpx.HTTPError as e:
                phase.record(type(e).__name__)
        await c.delete(f"/v1/sandboxes/{sid}", headers=AUTH)


async def shutdown(url: str, proc, phase: Phase, n: int) -> None:
    from inhabit.sandbox.remote import RemoteSandboxProvider

    prov = RemoteSandboxProvider(url, TOKEN)
    sbs = [await prov.create("server:ws") for _ in range(n)]
    t0 = time.monotonic()

    async def run(sb) -> None:
        try:
            await sb.exec(LONG, timeout_s=120)
            phase.record("finished")
        except Exception as e:
            phase.record(kind(e), time.monotonic() - t0)

    tasks = [asyncio.create_task(run(sb)) for sb in sbs]
    deadline = time.monotonic() + 60
    while len(leftovers(LONG)["processes"]) < n and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    await asyncio.gather(*tasks)
    code = await asyncio.to_thread(proc.wait, 60)
    phase.notes |= {"exit_code": code, "exit_s": round(time.monotonic() - t0, 2)}
    await prov.close()


async def main(args: argparse.Namespace) -> None:
    logging.getLogger("inhabit").setLevel(logging.ERROR)  # closes after SIGTERM warn by design
    quick = args.quick
    secs = args.phase_seconds or (6 if quick else 30)
    root = Path(tempfile.mkdtemp(prefix="envserver-load-"))
    (root / "ws" / "pkg").mkdir(parents=True)
    (root / "ws" / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    before = leftovers(LONG)
    argv = ["--log-level", "WARNING", "env-server", "--port", str(port), "--backend", args.backend,
            "--root", str(root), "--max-sandboxes", str(args.max_sandboxes), "--lease-s", str(args.lease_s),
            "--max-file-mb", "1"]  # fmt: skip
    proc = start(argv, {"INHABIT_ENV_TOKEN": TOKEN}, root.parent / f"{root.name}.log")
    ready_s = wait_ready(url + "/v1/health", proc, AUTH)
    phases = []
    with Phase("steady", proc.pid) as p:
        await clients(url, p, 4 if quick else 8, secs)
    phases.append(p.summary())
    with Phase("overload", proc.pid) as p:
        await clients(url, p, 2 * args.max_sandboxes, secs, hold_s=0.5)
        p.notes["clients"] = 2 * args.max_sandboxes
    phases.append(p.summary())
    with Phase("abandoned", proc.pid) as p:
        await abandoned(url, p, 4 if quick else 16)
        p.notes["lease_s"] = args.lease_s
    phases.append(p.summary())
    with Phase("hostile", proc.pid) as p:
        await hostile(url, p)
    phases.append(p.summary())
    if args.soak_seconds:
        await clients(url, Phase("warm-up", proc.pid), 8, min(30, args.soak_seconds / 10))
        with Phase("soak", proc.pid) as p:
            await clients(url, p, 8, args.soak_seconds)
        p.notes["rss_growth_pct"] = round(
            100 * ((p.rss_end or 0) - (p.rss_start or 1)) / (p.rss_start or 1), 2
        )
        phases.append(p.summary())
    with Phase("shutdown", proc.pid) as p:
        await shutdown(url, proc, p, 8 if quick else 32)
    phases.append(p.summary())
    left = new_since(before, leftovers(LONG, proc.pid))
    report(
        f"inhabit sandbox env-server under load and faults (backend {args.backend}, loopback)",
        phases,
        {"ready_s": round(ready_s, 1), "leftovers_after_shutdown": left, "args": vars(args)},
        RESULTS / "envserver_load.json",
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Short phases and fewer clients (about a minute).")
    ap.add_argument("--backend", default="auto", help=f"{SANDBOX_BACKENDS.choices(local_only=True)}.")
    ap.add_argument("--phase-seconds", type=float, default=None, help="Length of steady and overload phases.")
    ap.add_argument(
        "--soak-seconds", type=float, default=0, help="Steady load this long, RSS compared (0: skip)."
    )
    ap.add_argument("--max-sandboxes", type=int, default=32, help="--max-sandboxes of the server.")
    ap.add_argument("--lease-s", type=float, default=5.0, help="--lease-s of the server.")
    asyncio.run(main(ap.parse_args()))
