"""Online learning benchmark: time from a user's signal to a new version being served, and failed
requests while versions are swapped under 16 concurrent sessions.

Everything runs as deployed, in its own process, on 127.0.0.1: `inhabit serve --follow WEIGHTS
--sessions DB` over the quickstart model's architecture and tokenizer, and `inhabit online run`
beside it. 16 simulated clients hold agent-like conversations (2 turns each, X-Inhabit-Session
header); each round rates `--sessions-per-cycle` finished sessions through the server
(POST /v1/sessions/ID/signals), which makes a cycle due; the clock runs from the last signal until
/health reports the new version. Weights start from random init with the quickstart's spec: the
time of a cycle depends on the architecture and the number of tokens, not on what the weights know.

Baseline (same process): a restart-based deployment, i.e. the same cycle's train time plus a cold
`inhabit serve` start on the new checkpoint until it answers one request.

    PYTHONPATH=src .venv/bin/python bench/online.py            # 3 cycles
    PYTHONPATH=src .venv/bin/python bench/online.py --cycles 1 --sessions-per-cycle 4

Goals (issue 14): signal-to-served < 60 s; 0 failed requests during swaps. Prints one table and
writes bench/results/online.json. Timings on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import signal
import sqlite3
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx
from rich.console import Console
from rich.table import Table

from loadkit import RESULTS, free_port, machine, start, wait_ready

ROOT = Path(__file__).resolve().parents[1]


def build_model(where: Path) -> Path:
    """The quickstart's model (configs/quickstart.toml [model]) from random init, with its tokenizer."""
    import tomllib

    from inhabit.models.tiny import TinyModelSpec, build_tiny_model, save_model_folder
    from inhabit.orchestrator.quickstart.bootstrap import quickstart_tokenizer

    spec = tomllib.loads((ROOT / "configs" / "quickstart.toml").read_text())["model"]["spec"]
    tok = quickstart_tokenizer()
    vocab = (max(len(tok), 64) + 63) // 64 * 64
    model = build_tiny_model(TinyModelSpec(**spec), vocab_size=vocab, seed=0)
    return save_model_folder(model, tok, where / "quickstart-arch")


class Clients:
    """16 conversations at a time; each ends after `turns` requests and a new one starts."""

    def __init__(self, url: str, n: int, turns: int, max_tokens: int) -> None:
        self.url, self.n, self.turns, self.max_tokens = url, n, turns, max_tokens
        self.outcomes: Counter = Counter()
        self.finished: list[str] = []
        self.spanning = 0  # requests whose tokens came from two versions: a swap landed mid-request
        self.stop = asyncio.Event()
        self.counter = 0

    async def conversation(self, http: httpx.AsyncClient, worker: int) -> None:
        while not self.stop.is_set():
            self.counter += 1
            sid = f"bench-{worker}-{self.counter}"
            messages = [{"role": "user", "content": "The test test_add fails. Fix the bug in calc.py."}]
            for _ in range(self.turns):
                body = {"model": "m", "messages": messages, "max_tokens": self.max_tokens, "temperature": 1.0}
                try:
                    r = await http.post("/v1/chat/completions", json=body, headers={"X-Inhabit-Session": sid})
                    kind = "ok" if r.status_code == 200 else f"http_{r.status_code}"
                    if r.status_code == 200:
                        choice = r.json()["choices"][0]
                        if len(set(choice.get("policy_versions") or [])) > 1:
                            self.spanning += 1
                        messages += [
                            {"role": "assistant", "content": choice["message"]["content"] or ""},
                            {"role": "user", "content": "<observation>ok</observation>"},
                        ]
                except httpx.HTTPError as e:
                    kind = type(e).__name__
                self.outcomes[kind] += 1
            if self.outcomes["ok"]:
                self.finished.append(sid)

    async def run(self) -> None:
        async with httpx.AsyncClient(base_url=self.url, timeout=300) as http:
            await asyncio.gather(*(self.conversation(http, i) for i in range(self.n)))


async def version(http: httpx.AsyncClient) -> int:
    return int((await http.get("/health")).json()["version"])


async def drive(args: argparse.Namespace, url: str, db: Path) -> tuple[list[dict], Clients]:
    clients = Clients(url, args.concurrency, args.turns, args.max_tokens)
    runner = asyncio.create_task(clients.run())
    rng = random.Random(args.seed)
    rounds: list[dict] = []
    rated = 0
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        current = await version(http)
        for cycle in range(args.cycles):
            while len(clients.finished) - rated < args.sessions_per_cycle:
                await asyncio.sleep(0.2)
            batch = clients.finished[rated : rated + args.sessions_per_cycle]
            rated += len(batch)
            good = [rng.random() < 0.5 for _ in batch]
            good[0], good[-1] = True, False  # both kinds in every batch: the update has a gradient
            for sid, ok in zip(batch, good, strict=True):
                r = await http.post(
                    f"/v1/sessions/{sid}/signals", json={"kind": "rating", "value": 1 if ok else -1}
                )
                r.raise_for_status()
            t_signal, wall_signal = time.monotonic(), time.time()
            while (v := await version(http)) == current:
                if time.monotonic() - t_signal > args.timeout_s:
                    raise RuntimeError(f"cycle {cycle}: no new version after {args.timeout_s} s")
                await asyncio.sleep(0.1)
            served = time.monotonic() - t_signal
            wall_served = time.time()
            rounds.append(
                {
                    "cycle": cycle,
                    "version": v,
                    "sessions": len(batch),
                    "signal_to_served_s": round(served, 2),
                    "wall": [wall_signal, wall_served],
                    "requests_so_far": sum(clients.outcomes.values()),
                }
            )
            current = v
    await asyncio.sleep(2.0)  # requests in flight over the last swap finish
    clients.stop.set()
    await runner
    return rounds, clients


def cycle_times(db: Path) -> dict[int, tuple[dict, float, float]]:
    """version -> (train figures, cycle started at, published at), from the cycle log."""
    with sqlite3.connect(db) as c:
        rows = c.execute(
            "SELECT version, train, started_at, finished_at FROM cycles WHERE status = 'published'"
        ).fetchall()
    return {v: (json.loads(t or "null") or {}, s, f) for v, t, s, f in rows}


def restart_seconds(model: Path, log: Path) -> float:
    """A cold `inhabit serve` start on `model` until it answers one chat request."""
    port = free_port()
    t0 = time.monotonic()
    proc = start(["serve", "--model", str(model), "--port", str(port)], {}, log)
    try:
        wait_ready(f"http://127.0.0.1:{port}/health", proc)
        body = {"model": model.name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        httpx.post(f"http://127.0.0.1:{port}/v1/chat/completions", json=body, timeout=120).raise_for_status()
        return time.monotonic() - t0
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cycles", type=int, default=3)
    ap.add_argument("--sessions-per-cycle", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--turns", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="inhabit-online-bench-"))
    model = build_model(work)
    db, weights = work / "sessions.db", work / "weights"
    toml = work / "online.toml"
    toml.write_text(
        f'store = "{db}"\nweights = "{weights}"\n[cycle]\nmin_sessions = {args.sessions_per_cycle}\npoll_s = 0.2\n'
        "[train]\nupdates = 1\nmax_lag = 10\n[train.trainer]\nlr = 3e-4\nnum_threads = 1\n"
    )
    init = start(["online", "init", "--config", str(toml), "--model", str(model)], {}, work / "init.log")
    assert init.wait(timeout=600) == 0, (work / "init.log").read_text()
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    serve = start(
        [
            "serve",
            "--model",
            str(model),
            "--port",
            str(port),
            "--served-model-name",
            "m",
            "--follow",
            str(weights),
            "--sessions",
            str(db),
            "--set",
            "follow_poll_s=0.2",
            "--set",
            "engine.num_threads=1",
        ],
        {},
        work / "serve.log",
    )
    loop = start(["online", "run", "--config", str(toml)], {}, work / "online.log")
    try:
        wait_ready(f"{url}/health", serve)
        rounds, clients = asyncio.run(drive(args, url, db))
    finally:
        for p in (loop, serve):
            p.send_signal(signal.SIGTERM)
            p.wait(timeout=60)
    times = cycle_times(db)
    newest = max(r["version"] for r in rounds)
    ckpt = Path(str(db) + ".online") / "checkpoints" / f"v{newest:06d}"
    restart = restart_seconds(ckpt, work / "restart.log")
    table = Table(title="online: signal -> served (hot swap) vs a restart-based deployment")
    cols = (
        "cycle",
        "version",
        "sessions",
        "signal->served s",
        "signal->cycle start s",
        "cycle s",
        "train s",
        "published->served s",
        "restart baseline s",
        "ratio",
    )
    for col in cols:
        table.add_column(col)
    for r in rounds:
        figures, started, published = times[r["version"]]
        train = figures.get("seconds", 0.0)
        r["cycle_parts_s"] = {
            k: figures.get(k) for k in ("samples_s", "load_s", "seconds", "save_s", "publish_s")
        }
        wall_signal, wall_served = r.pop("wall")
        r["signal_to_cycle_start_s"] = round(started - wall_signal, 2)
        r["cycle_s"] = round(published - started, 2)
        r["published_to_served_s"] = round(wall_served - published, 2)
        base = train + restart
        r["train_s"] = round(train, 2)
        r["restart_baseline_s"] = round(base, 2)
        r["ratio_vs_restart"] = round(r["signal_to_served_s"] / base, 3)
        keys = (
            "cycle",
            "version",
            "sessions",
            "signal_to_served_s",
            "signal_to_cycle_start_s",
            "cycle_s",
            "train_s",
            "published_to_served_s",
            "restart_baseline_s",
            "ratio_vs_restart",
        )
        table.add_row(*(str(r[k]) for k in keys))
    console = Console(width=200)
    console.print(table)
    failed = {k: v for k, v in clients.outcomes.items() if k != "ok"}
    summary = {
        "goal_signal_to_served_s": 60,
        "max_signal_to_served_s": max(r["signal_to_served_s"] for r in rounds),
        "requests": sum(clients.outcomes.values()),
        "failed_requests": failed,
        "requests_spanning_a_swap": clients.spanning,
        "concurrency": args.concurrency,
        "cold_restart_s": round(restart, 2),
        "model": "the quickstart's model spec and tokenizer (configs/quickstart.toml), random init",
    }
    for k, v in summary.items():
        console.print(f"{k}: {v}")
    out = RESULTS / "online.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"rounds": rounds, **summary, "args": vars(args), "machine": machine()}, indent=2)
    )
    console.print(f"wrote {out}")


if __name__ == "__main__":
    main()
