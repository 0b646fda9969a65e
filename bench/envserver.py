"""Benchmark: what the environment server costs over a local provider, on loopback.

Baseline (measured in the same run): the same backend used in-process. The server runs as
`inhabit sandbox env-server` in its own process, as deployed. Measured for both:
create from a directory (remote: packed and uploaded) and from a snapshot, exec of `true`,
a 64 KiB file write+read, and a pool burst (acquire, run one command, return) with 32 in flight.
Prints a table with remote/local ratios and writes bench/results/envserver.json.

    PYTHONPATH=src .venv/bin/python bench/envserver.py [--backend process|bwrap] [--n 40]

Timings on a shared 2-core machine are noisy; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from inhabit.sandbox import SandboxConfig, SandboxLimits, create_provider
from inhabit.sandbox.base import SandboxProvider
from inhabit.sandbox.pool import SandboxPool
from inhabit.sandbox.remote import RemoteSandboxProvider

TOKEN = "bench-token-123456"


@contextlib.contextmanager
def served(backend: str) -> Iterator[str]:
    """`inhabit sandbox env-server` in its own process on 127.0.0.1 (as deployed: no shared GIL)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "INHABIT_ENV_TOKEN": TOKEN, "PYTHONPATH": str(Path(__file__).parents[1] / "src")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "inhabit",
            "--log-level",
            "WARNING",
            "env-server",
            "--port",
            str(port),
            "--backend",
            backend,
        ],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):  # bounded wait for it to answer
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/v1/health", headers={"Authorization": f"Bearer {TOKEN}"}).is_success:
                    break
            time.sleep(0.1)
        else:
            raise RuntimeError("env-server did not start")
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def make_workspace(root: Path, files: int = 200) -> Path:
    ws = root / "ws"
    for i in range(files):
        d = ws / f"pkg{i % 10}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"mod{i}.py").write_text(f"def f{i}():\n    return {i}\n" * 20)
    return ws


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return 1000 * xs[min(len(xs) - 1, int(q * len(xs)))]


async def measure(provider: SandboxProvider, ws: Path, n: int, burst: int) -> dict[str, float]:
    out: dict[str, float] = {}
    seed = await provider.create(ws)
    snap = await seed.snapshot()
    for name, source in (("create_dir", ws), ("create_snapshot", snap)):
        lat = []
        for _ in range(n):
            t0 = time.perf_counter()
            sb = await provider.create(source)
            lat.append(time.perf_counter() - t0)
            await sb.close()
        out[f"{name}_p50_ms"] = pct(lat, 0.5)
        out[f"{name}_p99_ms"] = pct(lat, 0.99)
    lat, io_lat = [], []
    blob = b"x" * 65536
    for _ in range(n):
        t0 = time.perf_counter()
        await seed.exec(["true"])
        lat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await seed.write_file("blob.bin", blob)
        assert await seed.read_file("blob.bin") == blob
        io_lat.append(time.perf_counter() - t0)
    out["exec_true_p50_ms"] = pct(lat, 0.5)
    out["file_rw_64k_p50_ms"] = pct(io_lat, 0.5)
    await seed.close()

    async with SandboxPool(provider, snap, size=8, max_concurrent_creates=8) as pool:
        sem = asyncio.Semaphore(32)

        async def one() -> None:
            async with sem, pool.acquire() as sb:
                await sb.exec(["true"])

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(burst)))
        out["burst_per_s"] = burst / (time.perf_counter() - t0)
        out["burst_pool_hit_rate"] = pool.stats.hits / max(1, pool.stats.hits + pool.stats.misses)
    return out


async def main_async(backend: str, n: int, burst: int) -> dict[str, object]:
    limits = SandboxLimits()
    with tempfile.TemporaryDirectory() as tmp:
        ws = make_workspace(Path(tmp))
        local = create_provider(SandboxConfig(backend=backend, limits=limits))  # type: ignore[arg-type]
        try:
            local_res = await measure(local, ws, n, burst)
            name = getattr(local, "backend", backend)
        finally:
            await local.close()
        with served(backend) as url:
            remote = RemoteSandboxProvider(url, TOKEN)
            try:
                remote_res = await measure(remote, ws, n, burst)
            finally:
                await remote.close()
    return {"backend": name, "n": n, "burst": burst, "local": local_res, "remote": remote_res}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="auto", choices=["auto", "bwrap", "process"])
    ap.add_argument("--n", type=int, default=40, help="Repetitions per latency measurement.")
    ap.add_argument("--burst", type=int, default=200, help="Sandboxes in the pool burst.")
    args = ap.parse_args()
    res = asyncio.run(main_async(args.backend, args.n, args.burst))
    local, remote = res["local"], res["remote"]
    table = Table(title=f"env server over loopback vs in-process ({res['backend']} backend)")
    for col in ("metric", "in-process (baseline)", "remote", "remote / baseline"):
        table.add_column(col, justify="right")
    for key in local:  # type: ignore[union-attr]
        lv, rv = local[key], remote[key]  # type: ignore[index]
        table.add_row(key, f"{lv:.2f}", f"{rv:.2f}", f"{rv / lv:.2f}x" if lv else "-")
    Console().print(table)
    out = Path(__file__).parent / "results" / "envserver.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    res["ratios"] = {k: (remote[k] / local[k] if local[k] else None) for k in local}  # type: ignore[index,union-attr]
    out.write_text(json.dumps(res, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
