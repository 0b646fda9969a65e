"""`inhabit online simulate`: simulated users beside a real online deployment (online_sim.py).

The command sits with the other `inhabit online` commands; it is registered from the orchestrator
because the simulation drives the quickstart's task family and bootstrap, which live here, and no
part may import the orchestrator. Heavy imports stay inside the command body.
"""

from __future__ import annotations

from pathlib import Path

import typer


def simulate(
    seed: int = typer.Option(0, "--seed", min=0, help="First seed (users, noise, sampling)."),
    seeds: int = typer.Option(1, "--seeds", min=1, max=16, help="Seeds to run: seed, seed+1, ..."),
    versions: int = typer.Option(3, "--versions", min=1, max=50, help="Cycles of the loop (candidates)."),
    sessions: int = typer.Option(24, "--sessions", min=2, help="Sessions on each served version."),
    users: int = typer.Option(10, "--users", min=1, help="Simulated users (sessions go to them in turn)."),
    noise: float = typer.Option(0.1, "--noise", min=0.0, max=0.5, help="Share of answers flipped."),
    silent: float = typer.Option(0.2, "--silent", min=0.0, max=0.99, help="Share of users who never answer."),
    concurrency: int = typer.Option(4, "--concurrency", min=1, max=256, help="Sessions at once."),
    model: Path | None = typer.Option(
        None, "--model", help="Starting model folder (default: build or reuse the quickstart's bootstrap)."
    ),
    out: Path = typer.Option(
        Path("runs/online-sim"), "--out", help="Output folder (one subfolder per seed)."
    ),
    overrides: list[str] = typer.Argument(
        None,
        help="Other SimulateConfig fields, e.g. lr=1e-4 updates=4 gate_samples=1 (inhabit/orchestrator/online_sim.py).",
    ),
) -> None:
    """Simulated users run `inhabit agent` sessions against `inhabit serve` while the loop learns."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from inhabit.config import apply_overrides, validate_config
    from inhabit.orchestrator.online_sim import SimulateConfig, simulate

    data = {
        "seed": seed,
        "seeds": seeds,
        "versions": versions,
        "sessions": sessions,
        "users": users,
        "noise": noise,
        "silent": silent,
        "concurrency": concurrency,
        "model": None if model is None else str(model),
        "out": str(out),
    }
    from inhabit.errors import ConfigError, OnlineError

    try:
        cfg = validate_config(
            SimulateConfig, apply_overrides(data, overrides or []), source="simulate options"
        )
    except ConfigError as e:  # one line: "invalid simulate options: field: message; ..."
        raise OnlineError("; ".join(x.strip() for x in str(e).splitlines()).replace(":;", ":")) from None
    console = Console()
    total = cfg.seeds * cfg.sessions * (cfg.versions + 1)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("starting model", total=total)

        def progress(what: str, done: int) -> None:
            bar.update(task, advance=done, **({"description": what} if what else {}))

        result = simulate(cfg, progress, lambda line: bar.console.print(line, highlight=False))
    from inhabit.online.sim_report import print_report

    print_report(result, console)
    console.print(f"wrote {cfg.out}/simulate.json", highlight=False)
