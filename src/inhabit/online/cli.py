"""`inhabit online ...`: rate sessions, observe outcomes, run and inspect the loop.

    inhabit online feedback 3f2a9c good --note "clean fix"   # a rating for one session
    inhabit online sessions                                # sessions, signals, rewards
    inhabit online outcomes --repo . --test-command "pytest -q"   # kept / reverted / tests_passed
    inhabit online init --config online.toml --model MODEL_DIR    # version 0 of the weights
    inhabit online run --config online.toml                # the cycle, forever
    inhabit online log --store sessions.db                 # one line per version
    inhabit online simulate --seeds 3 --versions 3         # simulated users (orchestrator/online_sim_cli.py)

Heavy imports (torch, the trainer) stay inside the command bodies.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

online_app = typer.Typer(
    name="online",
    help="Learn from real sessions: ratings, cycles, outcomes, the version log.",
    no_args_is_help=True,
)


def _store_path(store: Path | None, repo: Path | None = None) -> Path:
    import os

    from inhabit.online.config import OPT_IN_FILE, default_store, repo_opt_in

    if store is not None:
        return store
    if os.environ.get("INHABIT_ONLINE_STORE"):
        return default_store()
    root = (repo or Path.cwd()).resolve()
    if (root / OPT_IN_FILE).is_file() and (cfg := repo_opt_in(root)) is not None:
        return cfg.store_path()
    return default_store()


def _open(store: Path | None, repo: Path | None = None) -> Any:
    from inhabit.online.store import SessionStore

    return SessionStore(_store_path(store, repo), create=False)


def _load(config: Path, overrides: list[str]) -> Any:
    from inhabit.config import load_config
    from inhabit.online.config import OnlineConfig

    return load_config(OnlineConfig, config, overrides)


_STORE_HELP = (
    "Session store (default: $INHABIT_ONLINE_STORE, the repo's .inhabit/online.toml, ~/.inhabit/online)."
)


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    app.add_typer(online_app, name="online")

    @online_app.command("feedback")
    @app.command("feedback", hidden=True)  # the spelling of earlier releases, kept for scripts
    def feedback(
        session: str = typer.Argument(..., help="Session id (or a unique prefix of 6+ characters)."),
        rating: str = typer.Argument(..., help="good or bad."),
        note: str | None = typer.Option(None, "--note", help="Free text kept with the rating (redacted)."),
        store: Path | None = typer.Option(None, "--store", help=_STORE_HELP),
    ) -> None:
        """Rate a recorded session: it becomes a reward for online training."""
        from inhabit.errors import OnlineError

        if rating not in ("good", "bad"):
            raise OnlineError(f"rating must be good or bad, not {rating!r}")
        db = _open(store)
        try:
            sid = db.resolve(session)
            db.add_signal(sid, "rating", 1.0 if rating == "good" else -1.0, note=note)
        finally:
            db.close()
        typer.echo(f"session {sid}: rated {rating}")


@online_app.command()
def sessions(
    store: Path | None = typer.Option(None, "--store", help=_STORE_HELP),
    limit: int = typer.Option(50, "--limit", min=1, help="Newest this many."),
    config: Path | None = typer.Option(None, "--config", help="OnlineConfig TOML (for its reward table)."),
) -> None:
    """List sessions with their signals, reward and ledger status."""
    from rich.console import Console
    from rich.table import Table

    from inhabit.online.config import RewardConfig
    from inhabit.online.rewards import reward_of

    rewards = _load(config, []).rewards if config else RewardConfig()
    db = _open(store)
    try:
        rows, used = db.sessions()[-limit:], db.used()
    finally:
        db.close()
    table = Table(title=f"{len(rows)} session(s)")
    for col in ("id", "source", "created", "version", "signals", "reward", "ledger"):
        table.add_column(col)
    for r in rows:
        reward = reward_of(r.signals, rewards)
        table.add_row(
            r.id,
            r.source,
            time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.created_at)),
            "-" if r.version is None else str(r.version),
            ", ".join(f"{s.kind}={s.value:g}" for s in r.signals) or "-",
            "-" if reward is None else f"{reward:+.2f}",
            "-" if r.id not in used else f"cycle {used[r.id][0]} ({used[r.id][1]})",
        )
    Console().print(table)


@online_app.command()
def outcomes(
    repo: Path = typer.Option(Path("."), "--repo", help="The repository the sessions worked on."),
    test_command: str | None = typer.Option(
        None, "--test-command", help="Run this in the repository; its exit status becomes tests_passed."
    ),
    min_age_s: float = typer.Option(0.0, "--min-age", help="Only sessions at least this many seconds old."),
    store: Path | None = typer.Option(None, "--store", help=_STORE_HELP),
) -> None:
    """Record what became of accepted changes: kept or reverted, and whether the tests pass."""
    from inhabit.online.record import observe_outcomes

    repo = repo.resolve()
    db = _open(store, repo)
    try:
        counts = observe_outcomes(db, repo, test_command=test_command, min_age_s=min_age_s)
    finally:
        db.close()
    typer.echo(json.dumps(counts))


@online_app.command("log")
def log_(
    store: Path | None = typer.Option(None, "--store", help=_STORE_HELP),
    json_out: bool = typer.Option(False, "--json", help="One JSON object per cycle instead of a table."),
) -> None:
    """Every cycle: the version it made, its sessions, gate result and live figures."""
    from dataclasses import asdict

    from rich.console import Console
    from rich.table import Table

    db = _open(store)
    try:
        cycles = db.cycles()
    finally:
        db.close()
    if json_out:
        for c in cycles:
            typer.echo(json.dumps(asdict(c)))
        return
    table = Table(title="online versions")
    for col in ("cycle", "version", "parent", "status", "sessions", "gate", "live", "note"):
        table.add_column(col, overflow="fold")
    for c in cycles:
        gate = "-" if not c.gate else c.gate.get("summary", json.dumps(c.gate))
        live = "-"
        if c.live:
            live = f"{c.live.get('accepted', 0)}/{c.live.get('trials', 0)} accepted"
            if c.live.get("diff_ci") is not None:
                lo, hi = c.live["diff_ci"]
                live += f", vs parent [{lo:+.2f}, {hi:+.2f}]"
        table.add_row(
            str(c.id),
            "-" if c.version is None else str(c.version),
            "-" if c.parent is None else str(c.parent),
            c.status,
            str(len(c.sessions)),
            str(gate),
            live,
            c.note or "",
        )
    Console().print(table)


@online_app.command()
def init(
    config: Path = typer.Option(..., "--config", help="OnlineConfig TOML (store, weights, ...)."),
    model: Path = typer.Option(..., "--model", help="Model folder to deploy as the first version."),
    overrides: list[str] = typer.Argument(None, help="OnlineConfig overrides, e.g. gate.tolerance=0.1."),
) -> None:
    """Set up a deployment: the model becomes version 0 of the weight store and of the log."""
    from inhabit.online.cycle import OnlineLoop

    loop = OnlineLoop(_load(config, overrides or []))
    try:
        version = loop.init(model)
    finally:
        loop.close()
    typer.echo(
        f"version {version} published to {loop.config.weights}; serve it with "
        f"`inhabit serve --model {model} --follow {loop.config.weights}`"
    )


@online_app.command()
def run(
    config: Path = typer.Option(..., "--config", help="OnlineConfig TOML (store, weights, ...)."),
    cycles: int | None = typer.Option(None, "--cycles", min=1, help="Stop after this many cycles."),
    until_idle: bool = typer.Option(False, "--until-idle", help="Stop when no cycle is due."),
    overrides: list[str] = typer.Argument(None, help="OnlineConfig overrides, e.g. cycle.min_sessions=4."),
) -> None:
    """Harvest -> train -> gate -> publish -> watch, cycle after cycle (resumes after a crash)."""
    from inhabit.online.cycle import OnlineLoop

    loop = OnlineLoop(_load(config, overrides or []))

    def show(row: Any) -> None:
        counts = (row.train or {}).get("counts", {})
        gate = (row.gate or {}).get("summary", "-")
        typer.echo(
            f"cycle {row.id}: {row.status} version={row.version} sessions={len(row.sessions)} "
            f"gate={gate} counts={json.dumps(counts)}"
        )

    try:
        for line in loop.recover():
            typer.echo(f"recovered {line}")
        # Import the trainer and the model classes now, not in the first cycle after a signal.
        import inhabit.models.loading
        import inhabit.trainer.trainer
        import inhabit.weights.publish  # noqa: F401

        typer.echo("ready", err=True)
        n = loop.run(max_cycles=cycles, until_idle=until_idle, on_cycle=show)
    except KeyboardInterrupt:
        n = -1
    finally:
        loop.close()
    if n >= 0:
        typer.echo(f"{n} cycle(s) run")
