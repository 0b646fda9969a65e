"""`inhabit online simulate`: a population of simulated users beside a real online deployment.

    users (online/sim_users.py) --inhabit agent sessions--> inhabit serve --follow WEIGHTS --sessions DB
         | accept when the hidden tests pass              ^ swaps each published version in
         | (noise flips answers; silent users never say)  |
         v                                                |
    session store (the repositories opted in) --> inhabit online run: harvest, train, gate, publish, watch

Everything but the users is the deployed code, in its own process, on 127.0.0.1: `inhabit online
init` makes the starting model version 0, `inhabit serve --follow --sessions` serves it, and
`inhabit online run` runs the cycle. The starting model is the quickstart's bootstrapped model
(built into the quickstart's run folder cache, or `--model DIR`). The quickstart's held-out tasks
are split in two: the first half are the tasks users bring, the second half the gate's held-out
tasks, so a version's gate figure is measured on tasks no user trained it on.

The simulation goes in rounds: `sessions` sessions on the served version, then one cycle of the
loop (`inhabit online run --cycles 1 --until-idle`: the same cycle a deployment runs forever; one
per round makes "sessions per version" exact), then the next round on whatever is served now. A
refused candidate is never served, so the next round runs on the same version again.

What it reports per version: parent, status, sessions trained on, the gate's figures, live
acceptance (accepted / answered, Wilson interval) and the true success rate of its sessions (the
hidden tests, noise-free). Two checks: acceptance rose from version 0 to the last served version,
and no version was published whose gate success was below the deployed one's minus the tolerance.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from inhabit.config import Config
from inhabit.errors import OnlineError
from inhabit.sandbox.backends import LocalSandboxBackendName

SERVED_NAME = "sim"


class SimulateConfig(Config):
    """`inhabit online simulate`'s settings (the command's options)."""

    seed: int = Field(0, ge=0, description="First seed: users, their noise and the engine's sampling.")
    seeds: int = Field(1, ge=1, le=16, description="Seeds run one after another (seed, seed+1, ...).")
    versions: int = Field(3, ge=1, le=50, description="Cycles of the loop (candidate versions).")
    sessions: int = Field(24, ge=2, le=10_000, description="Sessions on each served version (one round).")
    users: int = Field(10, ge=1, le=10_000, description="Simulated users; sessions go to them in turn.")
    noise: float = Field(0.1, ge=0.0, le=0.5, description="Share of answers flipped.")
    silent: float = Field(0.2, ge=0.0, lt=1.0, description="Share of users who never answer.")
    concurrency: int = Field(4, ge=1, le=256, description="Sessions at once.")
    temperature: float = Field(1.0, gt=0.0, le=2.0, description="Sampling temperature of users' sessions.")
    model: str | None = Field(
        None, description="Starting model folder (default: the quickstart's bootstrap)."
    )
    quickstart: str = Field("configs/quickstart.toml", description="Quickstart run config (tasks, harness).")
    out: str = Field("runs/online-sim", description="Output folder (one subfolder per seed).")
    gate_samples: int = Field(2, ge=1, description="Gate rollouts per gate task.")
    tolerance: float = Field(0.05, ge=0.0, le=1.0, description="Gate tolerance (docs/online.md).")
    lr: float = Field(3e-4, gt=0.0, le=1.0, description="Online learning rate (the quickstart RL's).")
    updates: int = Field(4, ge=1, le=64, description="Optimizer updates per cycle (over its batch).")
    watch_min_sessions: int = Field(16, ge=1, description="Trials of a new version before it can roll back.")
    sandbox: LocalSandboxBackendName = Field(
        "auto", description="Sandbox backend of users' sessions and the gate."
    )
    timeout_s: float = Field(1800.0, gt=0, description="Longest a cycle or a server start may take.")

    @model_validator(mode="after")
    def _check(self) -> SimulateConfig:
        if round(self.silent * self.users) >= self.users:
            raise ValueError("every user would be silent: lower silent or raise users")
        return self


# ---------------------------------------------------------------------------- set-up


def quickstart_config(cfg: SimulateConfig) -> Any:
    from inhabit.config import load_config
    from inhabit.orchestrator.config import RunConfig

    path = Path(cfg.quickstart)
    if not path.is_file():
        raise OnlineError(f"--quickstart {path} is not a file (run from the repository root)")
    return load_config(RunConfig, path)


def split_tasks(qs: Any, out: Path) -> tuple[Path, Path]:
    """The quickstart's held-out tasks, written as two folders: (users' tasks, gate tasks)."""
    from inhabit.taskgen.families.quickstart import generate, write_quick_task
    from inhabit.taskgen.families.quickstart import split_tasks as qs_split

    if qs.tasks.source != "quickstart":
        raise OnlineError(f"{qs.tasks.source!r} tasks: the simulation needs tasks.source = 'quickstart'")
    _, held = qs_split(generate(qs.tasks.count, qs.tasks.seed), qs.tasks.held_out)
    if len(held) < 4:
        raise OnlineError("the quickstart holds out fewer than 4 tasks: nothing to split")
    root = out / "tasks"
    users, gate = root / "users", root / "gate"
    if not (root / ".done").exists():
        shutil.rmtree(root, ignore_errors=True)
        half = len(held) // 2
        for t in held[:half]:
            write_quick_task(users, t)
        for t in held[half:]:
            write_quick_task(gate, t)
        (root / ".done").write_text("ok\n")
    return users, gate


def starting_model(cfg: SimulateConfig, qs: Any, say: Callable[[str], None]) -> Path:
    """`--model`, checked; else the quickstart's bootstrapped model (built once, then reused)."""
    if cfg.model is not None:
        from inhabit.models.loading import check_model_folder

        folder = Path(cfg.model)
        if not folder.is_dir():
            raise OnlineError(f"--model {folder} is not a folder")
        check_model_folder(folder)
        return folder
    from inhabit.orchestrator.prepare import prepare
    from inhabit.sandbox import create_provider

    if qs.threads:
        import torch

        torch.set_num_threads(qs.threads)
    return prepare(qs, create_provider(qs.sandbox), say).model_dir


def online_toml(cfg: SimulateConfig, work: Path, gate: Path, qs: Any) -> Path:
    """The deployment's config: the quickstart RL's optimizer settings, the gate on the gate tasks."""
    loss = qs.trainer.loss.model_dump(mode="json")
    data = {
        "store": str(work / "sessions.db"),
        "weights": str(work / "weights"),
        "cycle": {"min_sessions": 1, "poll_s": 0.2},
        "train": {
            "updates": cfg.updates,
            "max_lag": 2,
            "trainer": {
                "lr": cfg.lr,
                "temperature": cfg.temperature,
                "micro_batch_tokens": qs.trainer.micro_batch_tokens,
                "num_threads": 1,
                "loss": loss,
            },
        },
        "gate": {
            "tasks": str(gate),
            "samples": cfg.gate_samples,
            "tolerance": cfg.tolerance,
            "max_turns": qs.harness.max_turns,
            "max_turn_tokens": qs.harness.max_turn_tokens,
            "sandbox": cfg.sandbox,
            "concurrency": cfg.concurrency,
        },
        "watch": {"min_sessions": cfg.watch_min_sessions},
    }
    from inhabit.config import validate_config
    from inhabit.online.config import OnlineConfig

    validate_config(OnlineConfig, data, source="the simulation's online config")
    path = work / "online.toml"
    path.write_text(_toml(data))
    return path


def _toml(data: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer for the nested dict above (scalars and tables only; TOML has no null, so
    a None field is left out and takes its default)."""
    lines, tables = [], []
    for k, v in data.items():
        if v is None:
            continue
        if isinstance(v, dict):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {json.dumps(v)}")
    out = "\n".join(lines) + "\n"
    for k, v in tables:
        name = f"{prefix}{k}"
        out += f"\n[{name}]\n" + _toml(v, name + ".")
    return out


# ---------------------------------------------------------------------------- processes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _inhabit(argv: list[str], log: Path) -> subprocess.Popen:
    """`python -m inhabit ARGV` in its own process, as deployed; output to `log`."""
    with log.open("w") as f:
        return subprocess.Popen([sys.executable, "-m", "inhabit", *argv], stdout=f, stderr=f, env=os.environ)


def _tail(log: Path, n: int = 6) -> str:
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    return " | ".join(lines[-n:]) or "(no output)"


def _run(argv: list[str], log: Path, timeout_s: float) -> None:
    proc = _inhabit(argv, log)
    try:
        rc = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise OnlineError(f"`inhabit {' '.join(argv[:2])}` took over {timeout_s:.0f} s; see {log}") from None
    if rc != 0:
        raise OnlineError(f"`inhabit {' '.join(argv[:2])}` exited {rc}: {_tail(log)}")


def _health(url: str) -> dict[str, Any] | None:
    import httpx

    try:
        r = httpx.get(f"{url}/health", timeout=5)
    except httpx.HTTPError:
        return None
    return r.json() if r.status_code == 200 else None


def _wait_version(url: str, proc: subprocess.Popen, version: int, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise OnlineError(f"`inhabit serve` exited {proc.returncode}: {_tail(log)}")
        h = _health(url)
        if h is not None and int(h.get("version", -1)) >= version:
            return
        time.sleep(0.2)
    raise OnlineError(f"`inhabit serve` did not serve version {version} within {timeout_s:.0f} s; see {log}")


# ---------------------------------------------------------------------------- one seed


async def _round(
    cfg: SimulateConfig,
    seed: int,
    start: int,
    users: list[Any],
    tasks: list[Any],
    work: Path,
    endpoint: str,
    qs: Any,
    on_session: Callable[[], None],
) -> list[Any]:
    """`cfg.sessions` sessions at `cfg.concurrency` at a time; session i is user i mod n's."""
    from inhabit.online.sim_users import run_session
    from inhabit.sandbox import SandboxConfig, create_provider

    provider = create_provider(SandboxConfig(backend=cfg.sandbox))
    gate = asyncio.Semaphore(cfg.concurrency)
    store = work / "sessions.db"

    async def one(i: int) -> Any:
        # Each session draws from its own generator: what it does does not depend on the order in
        # which concurrent sessions finish.
        rng = random.Random(f"{seed}:{i}")
        task = rng.choice(tasks)
        repo = work / "repos" / f"s{i:05d}"
        async with gate:
            await asyncio.to_thread(shutil.rmtree, repo, True)
            outcome = await run_session(
                i,
                users[i % len(users)],
                task,
                repo,
                store=store,
                endpoint=endpoint,
                model_name=SERVED_NAME,
                provider=provider,
                harness=qs.harness,
                temperature=cfg.temperature,
                noise=cfg.noise,
                rng=rng,
                # The endpoint policy guesses prompt sizes at 3.5 characters a token until the server
                # reports usage; the quickstart tokenizer packs more, so the guess alone would refuse
                # the first turn. The server still enforces its real max_model_len.
                context_window=4 * qs.engine.max_model_len,
            )
        on_session()
        return outcome

    try:
        return list(await asyncio.gather(*(one(i) for i in range(start, start + cfg.sessions))))
    finally:
        await provider.close()


def run_seed(
    cfg: SimulateConfig,
    seed: int,
    model: Path,
    users_dir: Path,
    gate_dir: Path,
    qs: Any,
    progress: Callable[[str, int], None],
) -> dict[str, Any]:
    """One simulated deployment from version 0 through `cfg.versions` cycles; its report."""
    from inhabit.online.sim_users import population
    from inhabit.online.store import SessionStore
    from inhabit.tasks.task import load_task

    work = Path(cfg.out) / f"seed-{seed}"
    shutil.rmtree(work, ignore_errors=True)  # a seed starts from nothing: no store, no weights
    work.mkdir(parents=True)
    tasks = [load_task(p) for p in sorted(users_dir.iterdir()) if (p / "task.toml").is_file()]
    toml = online_toml(cfg, work, gate_dir, qs)
    t0 = time.monotonic()
    progress(f"seed {seed}: version 0", 0)
    _run(["online", "init", "--config", str(toml), "--model", str(model)], work / "init.log", cfg.timeout_s)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    serve_log = work / "serve.log"
    sets = {
        "follow_poll_s": 0.2,
        "engine.num_threads": 1,
        "engine.seed": seed,
        "engine.max_model_len": qs.engine.max_model_len,
        "engine.max_batch_size": qs.engine.max_batch_size,
    }
    argv = ["serve", "--model", str(model), "--port", str(port), "--served-model-name", SERVED_NAME]
    argv += ["--follow", str(work / "weights"), "--sessions", str(work / "sessions.db")]
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    serve = _inhabit(argv, serve_log)
    users = population(cfg.users, cfg.silent, random.Random(f"users:{seed}"))
    outcomes: list[Any] = []
    timings: list[dict[str, Any]] = []
    try:
        _wait_version(url, serve, 0, serve_log, cfg.timeout_s)
        for r in range(cfg.versions + 1):
            served = int((_health(url) or {}).get("version", -1))
            progress(f"seed {seed}: sessions on version {served}", 0)
            t1 = time.monotonic()
            outcomes += asyncio.run(
                _round(cfg, seed, len(outcomes), users, tasks, work, f"{url}/v1", qs, lambda: progress("", 1))
            )
            t2 = time.monotonic()
            if r == cfg.versions:
                timings.append({"round": r, "sessions_s": round(t2 - t1, 1)})
                break
            progress(f"seed {seed}: cycle {r + 1} (train, gate, publish)", 0)
            _run(
                ["online", "run", "--config", str(toml), "--cycles", "1", "--until-idle"],
                work / f"loop-{r + 1}.log",
                cfg.timeout_s,
            )
            db = SessionStore(work / "sessions.db", create=False)
            try:
                dep = db.deployed()
            finally:
                db.close()
            assert dep is not None and dep.version is not None
            _wait_version(url, serve, dep.version, serve_log, cfg.timeout_s)
            timings.append(
                {"round": r, "sessions_s": round(t2 - t1, 1), "cycle_s": round(time.monotonic() - t2, 1)}
            )
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=60)
        except subprocess.TimeoutExpired:
            serve.kill()
    (work / "sessions.jsonl").write_text("".join(json.dumps(o.to_json()) + "\n" for o in outcomes))
    report = seed_report(cfg, work / "sessions.db", outcomes)
    report |= {"seed": seed, "wall_s": round(time.monotonic() - t0, 1), "timings": timings}
    (work / "simulate.json").write_text(json.dumps(report, indent=2))
    return report


# ---------------------------------------------------------------------------- the report


def wilson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float] | None:
    """Wilson score interval of a proportion k/n (None without trials)."""
    from statistics import NormalDist

    if n == 0:
        return None
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def seed_report(cfg: SimulateConfig, db_path: Path, outcomes: list[Any]) -> dict[str, Any]:
    """Per version: the cycle log's figures, live acceptance (the store's), true success (ours)."""
    from inhabit.online.config import RewardConfig
    from inhabit.online.store import SessionStore
    from inhabit.online.watch import acceptance

    db = SessionStore(db_path, create=False)
    try:
        cycles, rows, used = db.cycles(), db.sessions(), db.used()
    finally:
        db.close()
    live = acceptance(rows, RewardConfig())
    by_version: dict[int, list[Any]] = {}
    for o in outcomes:
        if o.version is not None:
            by_version.setdefault(o.version, []).append(o)
    versions = []
    for c in cycles:
        # A cycle without a version ("empty": no sample carried a gradient) is listed too.
        acc, answered = live.get(c.version, (0, 0)) if c.version is not None else (0, 0)
        own = by_version.get(c.version, []) if c.version is not None else []
        gate = c.gate or {}
        versions.append(
            {
                "version": c.version,
                "parent": c.parent,
                "status": c.status,
                "trained_on": (c.train or {}).get("counts", {}).get("trained", 0),
                "gate_success": gate.get("success_rate"),
                "gate_deployed": gate.get("deployed_success_rate"),
                "gate_passed": gate.get("passed"),
                "sessions": len(own),
                "accepted": acc,
                "answered": answered,
                "acceptance": acc / answered if answered else None,
                "acceptance_ci": wilson(acc, answered),
                "true_success": sum(o.passed for o in own) / len(own) if own else None,
                "note": c.note,
            }
        )
    # "Never ship a version the gate should have refused": every published candidate's gate
    # success is within tolerance of the version deployed when it was gated.
    bad = [
        v["version"]
        for v in versions
        if v["status"] in ("published", "rolled_back")
        and v["gate_success"] is not None
        and v["gate_deployed"] is not None
        and v["gate_success"] < v["gate_deployed"] - cfg.tolerance - 1e-12
    ]
    served = [v for v in versions if v["sessions"]]
    first, last = served[0], served[-1]
    rated = {o.session_id for o in outcomes if o.verdict is not None}
    consumed = [sid for sid in rated if sid in used]
    return {
        "versions": versions,
        "first_version": first["version"],
        "last_version": last["version"],
        "acceptance_first": first["acceptance"],
        "acceptance_last": last["acceptance"],
        "true_first": first["true_success"],
        "true_last": last["true_success"],
        "acceptance_rose": (last["acceptance"] or 0) > (first["acceptance"] or 0)
        and last["version"] != first["version"],
        "shipped_but_should_be_refused": bad,
        "episodes_trained": sum(v["trained_on"] for v in versions),
        "sessions": len(outcomes),
        "answered": sum(o.verdict is not None for o in outcomes),
        "flipped": sum(o.flipped for o in outcomes),
        "rated_consumed": len(consumed),
        "rated_in_pool": len(rated) - len(consumed),
        "ledger_entries": len(used),
    }


def simulate(
    cfg: SimulateConfig, progress: Callable[[str, int], None], say: Callable[[str], None]
) -> dict[str, Any]:
    """Every seed; the whole report (also written to `<out>/simulate.json`)."""
    qs = quickstart_config(cfg)
    if cfg.model is not None:  # a wrong --model stops before anything is written
        starting_model(cfg, qs, say)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    users_dir, gate_dir = split_tasks(qs, out)
    model = starting_model(cfg, qs, say).resolve()
    say(f"starting model: {model}")
    reports = []
    for seed in range(cfg.seed, cfg.seed + cfg.seeds):
        reports.append(run_seed(cfg, seed, model, users_dir.resolve(), gate_dir.resolve(), qs, progress))
    result = {
        "config": cfg.model_dump(),
        "model": str(model),
        "users_tasks": len(list(users_dir.glob("*/task.toml"))),
        "gate_tasks": len(list(gate_dir.glob("*/task.toml"))),
        "seeds": reports,
    }
    (out / "simulate.json").write_text(json.dumps(result, indent=2))
    return result
