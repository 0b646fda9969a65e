"""Load and fault benchmark of `inhabit serve`: steady, overload, abandoned clients, hostile inputs,
an optional soak, and a shutdown with work in flight, against a server this script starts on
127.0.0.1 (its own process, as deployed) over a tiny model it builds (dense-1m).

    PYTHONPATH=src .venv/bin/python bench/serve_load.py --quick
    PYTHONPATH=src .venv/bin/python bench/serve_load.py --phase-seconds 60 --soak-seconds 600

Goals (issue 22): steady 0 errors; overload sheds with 429 only (0 resets, 0 hangs past 60 s);
abandoned requests leave the batch within ~1 s; /health answers within 100 ms while 5 MB prompts
are refused and RSS grows < 50 MB per refused prompt; RSS growth < 5% over a 10-minute soak;
0 leftovers after SIGTERM. Every phase is bounded in time. Prints one table and writes
bench/results/serve_load.json. Timings on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import tempfile
import threading
import time
from pathlib import Path

import httpx

from loadkit import RESULTS, Phase, free_port, leftovers, new_since, report, rss_mb, start, wait_ready

MSG = [{"role": "system", "content": "You fix bugs."}, {"role": "user", "content": "Fix calc.py, please."}]


def build_model(where: Path) -> Path:
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    return save_model_folder(
        build_tiny_model("dense-1m", vocab_size=len(tok), seed=0), tok, where / "dense-1m"
    )


async def chat(
    http: httpx.AsyncClient, phase: Phase, *, stream: bool, max_tokens: int, timeout: float = 60
) -> None:
    body = {"model": "m", "messages": MSG, "max_tokens": max_tokens, "stream": stream, "temperature": 1.0}
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(timeout):
            if stream:
                async with http.stream("POST", "/v1/chat/completions", json=body) as r:
                    if r.status_code != 200:
                        await r.aread()
                        r.raise_for_status()
                    lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
                    if not lines or lines[-1] != "data: [DONE]":
                        raise StreamCut("the stream ended without data: [DONE]")
                    if any("error" in json.loads(x[6:]) for x in lines[:-1]):
                        raise StreamErrorEvent("the stream carried an error event")
            else:
                r = await http.post("/v1/chat/completions", json=body)
                r.raise_for_status()
        phase.record("ok", time.monotonic() - t0)
    except BaseException as e:
        if isinstance(e, asyncio.CancelledError):
            raise
        phase.record_error(e)


class StreamCut(Exception):
    """A 200 stream that ended before `data: [DONE]`."""


class StreamErrorEvent(Exception):
    """A 200 stream that carried an error event instead of tokens."""


async def clients(http: httpx.AsyncClient, phase: Phase, n: int, seconds: float, max_tokens: int) -> None:
    stop = time.monotonic() + seconds

    async def one(i: int) -> None:
        while time.monotonic() < stop:
            await chat(http, phase, stream=i % 2 == 0, max_tokens=max_tokens)

    await asyncio.gather(*(one(i) for i in range(n)))


async def idle_after(http: httpx.AsyncClient, limit_s: float = 60) -> float:
    """Seconds until the engine has nothing running or waiting (bounded)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < limit_s:
        s = (await http.get("/v1/engine/stats")).json()
        if not s["running"] and not s["waiting"]:
            return round(time.monotonic() - t0, 3)
        await asyncio.sleep(0.02)
    return float("inf")


async def abandoned(url: str, phase: Phase, n: int) -> None:
    body = {"model": "m", "messages": MSG, "max_tokens": 2000}
    async with httpx.AsyncClient(base_url=url, timeout=0.3) as quick:
        for _ in range(n):  # non-streaming: the client gives up after 0.3 s
            try:
                await quick.post("/v1/chat/completions", json=body)
                phase.record("finished before the client left")
            except httpx.TimeoutException:
                phase.record("ok")
    for _ in range(n):  # streaming: read the first chunk, then drop the connection
        async with httpx.AsyncClient(base_url=url, timeout=30) as c:
            async with c.stream("POST", "/v1/chat/completions", json=body | {"stream": True}) as r:
                async for _line in r.aiter_lines():
                    break
            phase.record("ok")


HOSTILE = [
    b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}]}',
    b'{"model": "m", "messages": [{"role": "user", "content": "a\\ud800b"}], "stream": true}',
    b'{"model": "m", "prompt": "x\\udfff"}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1180591620717411303424}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1000000000}',
    b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "seed": 1180591620717411303424}',
    b'{"model": "m", "messages": [{"role": "tool", "content": 3}], "n": -1, "top_p": NaN}',
    b'{"model": "m", "prompt": [-1, 99999999999]}',
    b"\xff\xfe not json at all",
    b"[]",
]


async def hostile(url: str, pid: int, phase: Phase, big: int) -> None:
    health: list[float] = []
    done = threading.Event()

    def poll_health() -> None:  # a thread of its own: this loop is busy sending megabytes
        with httpx.Client(base_url=url, timeout=30) as h:
            while not done.is_set():
                t0 = time.monotonic()
                h.get("/health")
                health.append(time.monotonic() - t0)
                time.sleep(0.02)

    async def send(data: bytes) -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as c:
            try:
                r = await c.post(
                    "/v1/chat/completions", content=data, headers={"content-type": "application/json"}
                )
                json_ok = r.headers.get("content-type", "").startswith("application/json")
                phase.record(str(r.status_code) if json_ok else f"{r.status_code}-not-json")
            except BaseException as e:
                phase.record_error(e)

    poller = threading.Thread(target=poll_health)
    poller.start()
    rss0 = rss_mb(pid)
    five_mb = json.dumps({"model": "m", "messages": [{"role": "user", "content": "x" * 5_000_000}]}).encode()
    under_cap = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "word " * 700_000}]}
    ).encode()
    await asyncio.gather(*(send(five_mb) for _ in range(big)), *(send(under_cap) for _ in range(big)))
    rss1 = rss_mb(pid)
    for data in HOSTILE:
        await send(data)
    done.set()
    poller.join(60)
    health.sort()
    phase.notes |= {
        "health_max_ms": round(1000 * health[-1], 1) if health else None,
        "health_p99_ms": round(1000 * health[int(0.99 * (len(health) - 1))], 1) if health else None,
        "rss_growth_per_big_prompt_mb": round(((rss1 or 0) - (rss0 or 0)) / (2 * big), 1),
    }


async def shutdown(url: str, proc, phase: Phase, n: int) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        tasks = [asyncio.create_task(chat(http, phase, stream=i % 2 == 0, max_tokens=2000)) for i in range(n)]
        await asyncio.sleep(1.0)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        await asyncio.gather(*tasks)
        code = await asyncio.to_thread(proc.wait, 60)
    phase.notes |= {"exit_code": code, "exit_s": round(time.monotonic() - t0, 2)}


async def main(args: argparse.Namespace) -> None:
    quick = args.quick
    secs = args.phase_seconds or (6 if quick else 30)
    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    model = build_model(work)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    before = leftovers(str(model))
    argv = ["serve", "--model", str(model), "--port", str(port), "--served-model-name", "m",
            "--set", f"engine.max_queue={args.max_queue}", "--set", f"engine.max_batch_size={args.batch}",
            "--set", "engine.num_threads=1"]  # fmt: skip
    proc = start(argv, {}, work / "server.log")
    ready_s = wait_ready(url + "/health", proc)
    phases = []
    limits = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    async with httpx.AsyncClient(base_url=url, timeout=60, limits=limits) as http:
        with Phase("steady", proc.pid) as p:
            await clients(http, p, 4 if quick else 8, secs, 16)
        phases.append(p.summary())
        with Phase("overload", proc.pid) as p:
            burst = args.overload_clients or 4 * args.max_queue
            await clients(http, p, burst, secs, 32)
            p.notes["clients"] = burst
        phases.append(p.summary())
        await idle_after(http)
        with Phase("abandoned", proc.pid) as p:
            await abandoned(url, p, 12 if quick else 48)
            p.notes["drain_s"] = await idle_after(http)
        phases.append(p.summary())
        with Phase("hostile", proc.pid) as p:
            await hostile(url, proc.pid, p, 2 if quick else 3)
        phases.append(p.summary())
        if args.soak_seconds:
            await clients(http, Phase("warm-up", proc.pid), 8, min(30, args.soak_seconds / 10), 16)
            with Phase("soak", proc.pid) as p:
                await clients(http, p, 8, args.soak_seconds, 16)
            rss_growth = 100 * ((p.rss_end or 0) - (p.rss_start or 1)) / (p.rss_start or 1)
            p.notes["rss_growth_pct"] = round(rss_growth, 2)
            phases.append(p.summary())
    with Phase("shutdown", proc.pid) as p:
        await shutdown(url, proc, p, 8 if quick else 16)
    phases.append(p.summary())
    left = new_since(before, leftovers(str(model), proc.pid))
    report(
        "inhabit serve under load and faults (dense-1m, loopback)",
        phases,
        {"ready_s": round(ready_s, 1), "leftovers_after_shutdown": left, "args": vars(args)},
        RESULTS / "serve_load.json",
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="Short phases and fewer clients (about a minute).")
    ap.add_argument("--phase-seconds", type=float, default=None, help="Length of steady and overload phases.")
    ap.add_argument(
        "--soak-seconds", type=float, default=0, help="Steady load this long, RSS compared (0: skip)."
    )
    ap.add_argument("--max-queue", type=int, default=32, help="engine.max_queue of the server.")
    ap.add_argument("--batch", type=int, default=16, help="engine.max_batch_size of the server.")
    ap.add_argument(
        "--overload-clients", type=int, default=0, help="Clients of the overload phase (0: 4 x max-queue)."
    )
    asyncio.run(main(ap.parse_args()))
