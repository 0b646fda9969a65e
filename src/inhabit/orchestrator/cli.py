"""Commands that the orchestrator part adds to `inhabit`: `train` and `quickstart`.

    inhabit train configs/quickstart.toml                      # a run from a TOML file
    inhabit train configs/quickstart.toml steps=5 mode=sync    # plus dotted overrides
    inhabit train configs/quickstart.toml --resume             # continue from the newest checkpoint
    inhabit train configs/quickstart.toml --dry-run            # resolved config and plan; no work
    inhabit quickstart                                         # = inhabit train configs/quickstart.toml
    inhabit online simulate --seeds 3                          # simulated users (online_sim_cli.py)

Heavy imports (torch, transformers) stay inside command bodies.
"""

from __future__ import annotations

from pathlib import Path

import typer

QUICKSTART_CONFIG = "configs/quickstart.toml"


def _find_quickstart() -> Path:
    here = Path(QUICKSTART_CONFIG)
    if here.is_file():
        return here
    repo = Path(__file__).resolve().parents[3] / QUICKSTART_CONFIG
    if repo.is_file():
        return repo
    from inhabit.errors import ConfigError

    raise ConfigError(f"{QUICKSTART_CONFIG} not found: run from the repository root")


def _print_result(summary: dict) -> None:
    ev = summary.get("eval", {})
    before, after = ev.get("before"), ev.get("after")
    typer.echo("")
    if before and after:
        typer.secho(
            f"held-out success rate: {before['success_rate']:.1%} before RL -> {after['success_rate']:.1%} after RL "
            f"({after['tasks']} tasks x {after['samples_per_task']} samples)",
            bold=True,
        )
    typer.echo(f"run folder: {summary['run_dir']} (metrics.jsonl, trajectories.jsonl, checkpoints/)")
    typer.echo(f"wall time: {summary.get('wall_s', 0):.0f} s")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    from inhabit.online.cli import online_app
    from inhabit.orchestrator.online_sim_cli import simulate

    online_app.command("simulate")(simulate)  # beside the other `inhabit online` commands

    @app.command(context_settings={"allow_extra_args": False})
    def train(
        config: Path = typer.Argument(..., help="Run TOML (see configs/)."),
        overrides: list[str] = typer.Argument(None, help="Dotted overrides: steps=20 trainer.lr=1e-4"),
        resume: bool = typer.Option(
            False, "--resume", help="Continue from the newest checkpoint of run_dir."
        ),
        ray_address: str | None = typer.Option(
            None, "--ray-address", help="Run on this Ray cluster (placement.backend=ray), e.g. 'auto'."
        ),
        dry_run: bool = typer.Option(
            False,
            "--dry-run",
            help="Print the resolved config and the plan (tasks, model, steps, placement); do nothing.",
        ),
    ) -> None:
        """Train a policy with RL inside the harness (async pipeline, or mode=sync)."""
        from inhabit.config import load_config
        from inhabit.orchestrator.config import RunConfig

        cfg = load_config(RunConfig, config, overrides or [])
        from inhabit.placement.trainer_dist import follow_torchrun

        if follow_torchrun(cfg):  # a torchrun rank other than 0: it trains, rank 0 runs the run
            return
        if ray_address:
            cfg.placement.backend = "ray"
            cfg.placement.ray.address = ray_address
        if dry_run:
            from inhabit.orchestrator.plan import render

            typer.echo(render(cfg))
            return
        from inhabit.orchestrator.run import train as run_train

        _print_result(run_train(cfg, resume=resume))

    @app.command()
    def quickstart(
        overrides: list[str] = typer.Argument(None, help="Dotted overrides for configs/quickstart.toml."),
        resume: bool = typer.Option(
            False, "--resume", help="Continue the quickstart run from its checkpoint."
        ),
    ) -> None:
        """The quickstart on a CPU: build tasks, bootstrap a tiny model, async RL, held-out before/after."""
        from inhabit.config import load_config
        from inhabit.orchestrator.config import RunConfig
        from inhabit.orchestrator.run import train as run_train

        path = _find_quickstart()
        typer.secho(f"inhabit quickstart: inhabit train {path}", bold=True)
        typer.echo(
            "  1. build small bug-fix tasks (train / held-out)   2. bootstrap a tiny model on a scripted "
            "expert's transcripts\n  3. asynchronous RL in the real harness and sandbox   4. held-out success "
            "before and after RL"
        )
        cfg = load_config(RunConfig, path, overrides or [])
        _print_result(run_train(cfg, resume=resume))
