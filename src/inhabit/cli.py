"""The `inhabit` command.

This file stays thin: each part registers its own commands from `inhabit/<part>/cli.py` (a
`register(app)` function), and those modules import their heavy dependencies (torch,
transformers, uvicorn) inside the command bodies, so `inhabit --help` starts in well under a
second and one part's missing optional extra never breaks another part's commands.

Errors reach the user as one line on stderr and a non-zero exit: a usage mistake (unknown option,
bad value) exits 2, a typed inhabit error exits with its class's `exit_code` (2 for bad input, 1
for a command that could not do its work, e.g. an unreachable model endpoint).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from typing import Any

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
    "inhabit.envs.cli",
    "inhabit.models.cli",
    "inhabit.inference.cli",
    "inhabit.weights.cli",
    "inhabit.evaluation.cli",
    "inhabit.orchestrator.cli",
    "inhabit.orchestrator.specialize.cli",
    "inhabit.orchestrator.midtrain.cli",
    "inhabit.online.cli",
    "inhabit.orchestrator.scale.cli",
    "inhabit.observability.viewer.cli",
)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(__version__)
        raise typer.Exit()


@app.callback()
def _root(
    log_level: str = typer.Option("INFO", "--log-level", help="DEBUG, INFO, WARNING or ERROR."),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    from inhabit.log import quiet_third_party_progress, setup_logging

    if log_level.upper() not in LOG_LEVELS:
        raise typer.BadParameter(
            f"{log_level!r}: choose one of {', '.join(LOG_LEVELS)}", param_hint="--log-level"
        )
    setup_logging(log_level)
    quiet_third_party_progress()


@app.command()
def version() -> None:
    """Print the inhabit version."""
    typer.echo(__version__)


for _module in COMMAND_MODULES:
    importlib.import_module(_module).register(app)


# typer >= 0.26 carries its own copy of click; its exception classes are reached through the one
# it exports, so this works with either.
_UsageError: type[Exception] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")


def _show_flags_as_flags(command: Any) -> None:
    """Boolean flags get no `<bool>` type column in help (typer's rich help shows one)."""
    # --help is made on first use and then cached on the command: make it now to reach it too.
    help_option = command.get_help_option(command.context_class(command))
    for param in [*command.params, help_option]:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        _show_flags_as_flags(sub)


def command() -> Any:
    """The click command tree of `app`, as `main` runs it."""
    cmd = typer.main.get_command(app)
    _show_flags_as_flags(cmd)
    return cmd


def _fail(message: str, code: int) -> None:
    typer.secho(f"error: {message}", fg=typer.colors.RED, err=True)
    raise SystemExit(code)


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point: every error the user can cause prints one line and exits non-zero."""
    try:
        rc = command().main(args=argv, prog_name="inhabit", standalone_mode=False)
    except _UsageError as e:
        if type(e).__name__ == "NoArgsIsHelpError":  # the help was printed already
            raise SystemExit(getattr(e, "exit_code", 2)) from None
        ctx = getattr(e, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _fail(e.format_message() + hint, getattr(e, "exit_code", 2))
    except typer.Abort:
        _fail("aborted", 1)
    except InhabitError as e:
        logging.getLogger("inhabit").debug("command failed", exc_info=True)
        _fail(str(e), e.exit_code)
    raise SystemExit(rc if isinstance(rc, int) else 0)
