"""`inhabit scale simulate|calibrate`: the scheduling code at scale, on virtual time (docs/scale.md).

inhabit scale simulate configs/scale.toml                     # one scenario, a table of figures
inhabit scale simulate configs/scale.toml engines=64 sandboxes=10000 --json out.json
inhabit scale calibrate runs/quickstart                       # a scenario fitted to a real run
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

scale_app = typer.Typer(
    name="scale",
    help="Simulate the real scheduler, buffer, dispatch and weight sync at scale, on virtual time.",
    no_args_is_help=True,
)

ROWS = (
    ("engine utilization (busy share)", "engine_utilization", "{:.1%}"),
    ("mean decode batch", "mean_batch", "{:.1f}"),
    ("trainer idle share", "trainer_idle", "{:.1%}"),
    ("rollouts per hour", "rollouts_per_hour", "{:,.0f}"),
    ("staleness of trained samples", "staleness", "{}"),
    ("lost to deadlines", "lost_to_deadline", "{:.2%}"),
    ("groups dropped as stale", "dropped_stale_groups", "{}"),
    ("engine tokens wasted by the staleness bound", "wasted_share", "{:.1%}"),
    ("rollouts that trained nothing", "rollouts_thrown_away", "{:.1%}"),
    ("groups generated again", "groups_regenerated", "{}"),
    ("partial rollouts paused and resumed", "partial_pauses", "{}"),
    ("retried rollouts", "retried", "{}"),
    ("weight-sync bytes per cluster per version", "sync_bytes_per_cluster_per_version", "{}"),
    ("swap pause per engine per version (s)", "swap_pause_per_engine_s", "{:.3f}"),
    ("control-plane CPU per rollout (ms)", "cpu_ms_per_rollout", "{:.2f}"),
    ("simulated seconds / wall seconds", "simulated_s", "{:.0f}"),
)


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    app.add_typer(scale_app, name="scale")


def print_result(r: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(
        title=f"{r['name']}: {r['engines']} engines, {r['sandboxes']} sandboxes, staleness {r['max_staleness']} ({r['stale_policy']})"
    )
    t.add_column("figure")
    t.add_column("value", justify="right")
    for label, key, fmt in ROWS:
        value = fmt.format(r[key])
        if key == "simulated_s":
            value += f" / {r['wall_s']:.1f}"
        t.add_row(label, value)
    Console().print(t)


@scale_app.command()
def simulate(
    config: Path = typer.Argument(
        ..., exists=True, dir_okay=False, help="Scenario TOML (configs/scale.toml)."
    ),
    overrides: list[str] = typer.Argument(None, help="Dotted overrides: engines=64 faults.slow_fraction=0.1"),
    json_out: Path | None = typer.Option(None, "--json", help="Also write the figures as JSON here."),
) -> None:
    """Run one scenario: the real pipeline, buffer, dispatch and weight sync on simulated parts."""
    from inhabit.config import load_config
    from inhabit.orchestrator.scale.config import ScaleConfig
    from inhabit.orchestrator.scale.simulate import simulate as run

    cfg = load_config(ScaleConfig, config, overrides or [])
    result = run(cfg)
    print_result(result)
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=1))


@scale_app.command()
def calibrate(
    run_dir: Path = typer.Argument(
        ..., exists=True, file_okay=False, help="Folder of a finished `inhabit train` run."
    ),
    simulate_it: bool = typer.Option(True, "--simulate/--no-simulate", help="Also simulate it and compare."),
) -> None:
    """Print the scenario fitted to a real run (JSON) and, by default, its prediction against the run."""
    from inhabit.orchestrator.scale.calibrate import calibrate as fit
    from inhabit.orchestrator.scale.simulate import simulate as run

    cfg, measured = fit(run_dir)
    typer.echo(cfg.model_dump_json(indent=1))
    if simulate_it:
        r = run(cfg)
        for key in ("rollouts_per_min", "trainer_idle"):
            typer.echo(
                f"{key}: simulated {r[key]:.3f}, measured {measured[key]:.3f} ({r[key] / measured[key] - 1:+.1%})"
            )
