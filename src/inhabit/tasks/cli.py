"""Commands that the tasks part adds to `inhabit`: `inhabit tasks check DIR [--json]` beside the
task builders of `inhabit tasks build|generate|import-humaneval|import-swebench` (taskgen/cli.py).
`inhabit tasks check` is the same command under its older spelling, hidden from --help.

Heavy imports stay inside command bodies so `inhabit --help` stays fast.
"""

from __future__ import annotations

from pathlib import Path

import typer

from inhabit.sandbox.backends import SANDBOX_BACKENDS

task_app = typer.Typer(
    help="Task directories: validate them (see docs/architecture.md).", no_args_is_help=True
)


@task_app.command("check")
def check(
    task_dir: Path = typer.Argument(..., help="Task directory (holding task.toml, workspace/, hidden/)."),
    json_out: bool = typer.Option(False, "--json", help="Print one JSON object instead of a report."),
    backend: str = typer.Option(
        "auto", "--backend", help=f"Sandbox backend: {SANDBOX_BACKENDS.choices(local_only=True)}."
    ),
    wheelhouse: Path | None = typer.Option(
        None,
        "--wheelhouse",
        help="Build a missing task environment offline from these wheels ($INHABIT_WHEELHOUSE).",
    ),
) -> None:
    """Validate a task directory; exit code 1 when it is invalid.

    Checks the format, that fail_to_pass tests fail before the fix and pass with reference.patch
    (when present), that pass_to_pass tests pass, and that grading raises no flag."""
    SANDBOX_BACKENDS.check(backend, local_only=True)
    if not task_dir.is_dir() and not (task_dir.name == "task.toml" and task_dir.is_file()):
        what = "is a file" if task_dir.exists() else "does not exist"
        raise typer.BadParameter(
            f"{task_dir} {what}; pass a task directory (holding task.toml, workspace/, hidden/)",
            param_hint="TASK_DIR",
        )
    import asyncio
    import json
    import os

    from inhabit.sandbox import SandboxConfig, create_provider

    if wheelhouse is not None:  # read where the task's environment is built (inhabit.envs.task_env)
        os.environ["INHABIT_WHEELHOUSE"] = str(wheelhouse.resolve())
    from inhabit.grading.check import check_task

    async def run():
        provider = create_provider(SandboxConfig(backend=backend))
        try:
            return await check_task(task_dir, provider)
        finally:
            await provider.close()

    report = asyncio.run(run())
    if json_out:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        _print_report(report)
    raise typer.Exit(0 if report.valid else 1)


def _print_report(report) -> None:  # type: ignore[no-untyped-def]
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # Test ids, paths and messages are the user's text: `test_p[one]` or "[grading]" is not markup.
    console = Console(highlight=False)
    title = escape(f"task {report.task_id or '?'} ({report.path})")
    if report.tests:
        table = Table(title=title)
        table.add_column("test", overflow="fold")
        for col in ("kind", "before", "with reference.patch", "ok"):
            table.add_column(col)
        colors = {
            "passed": "green",
            "failed": "red",
            "error": "red",
            "skipped": "yellow",
            "missing": "yellow",
        }
        for t in report.tests:
            after = "-" if t.after is None else f"[{colors.get(t.after, 'white')}]{t.after}[/]"
            table.add_row(
                escape(t.node_id),
                t.kind,
                f"[{colors.get(t.before, 'white')}]{t.before}[/]",
                after,
                "[green]yes[/]" if t.ok else "[red]NO[/]",
            )
        console.print(table)
    else:
        console.print(f"[bold]{title}[/]")
    for label, part in (("before", report.before), ("with reference.patch", report.after)):
        if part:
            flags = ", ".join(part["flags"]) or "none"
            console.print(escape(f"{label}: reward {part['reward']:g}, {part['summary']}; flags: {flags}"))
    for note in report.notes:
        console.print(f"[yellow]note:[/] {escape(note)}")
    for problem in report.problems:
        console.print(f"[red]problem:[/] {escape(str(problem))}")
    console.print("[bold green]VALID[/]" if report.valid else "[bold red]INVALID[/]")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    from inhabit.taskgen.cli import tasks_app

    tasks_app.command("check")(check)
    app.add_typer(task_app, name="task", hidden=True)  # `tasks check`: the spelling of earlier releases
    app.add_typer(tasks_app, name="tasks")
