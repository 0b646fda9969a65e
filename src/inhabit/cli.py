"""The `inhabit` command.

This file stays thin: each part registers its own commands from `inhabit/<part>/cli.py` (a
`register(app)` function), and those modules import their heavy dependencies (torch,
transformers, uvicorn) inside the command bodies, so `inhabit --help` starts in well under a
second and one part's missing optional extra never breaks another part's commands.
"""

from __future__ import annotations

import importlib

import typer

from inhabit import __version__
from inhabit.errors import InhabitError

app = typer.Typer(
    name="inhabit",
    help="Train coding agents with RL inside the very harness they ship in.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

# Parts that contribute commands, in the order their commands appear in --help.
COMMAND_MODULES = (
    "inhabit.sandbox.cli",
    "inhabit.sandbox.server_cli",
    "inhabit.harness.cli",
    "inhabit.tasks.cli",
    "inhabit.models.cli",
    "inhabit.inference.cli",
    "inhabit.weights.cli",
    "inhabit.evaluation.cli",
    "inhabit.orchestrator.cli",
)


@app.callback()
def _root(
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
) -> None:
    from inhabit.log import setup_logging

    setup_logging(log_level)


@app.command()
def version() -> None:
    """Print the inhabit version."""
    typer.echo(__version__)


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


def main() -> None:
    """Console-script entry point: typed inhabit errors print one clean line and exit 2."""
    try:
        app()
    except InhabitError as e:
        typer.secho(f"error: {e}", fg=typer.colors.RED, err=True)
        raise SystemExit(2) from None
