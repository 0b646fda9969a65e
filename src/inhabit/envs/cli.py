"""`inhabit env lock|build|list|prune`: task environments from the command line.

    inhabit env lock TASK_OR_FOLDER [--extra test] [--group test] [--requirements FILE] [--wheelhouse DIR]
                                    [--allow-build]
    inhabit env build TASK [--wheelhouse DIR] [--allow-build]
    inhabit env list
    inhabit env prune [--keep TASKS_DIR]...

Wheels only: a package with no wheel is refused (its build code would run on this machine) unless
`--allow-build` is given. Bad input and failed builds end in one `error:` line (exit 2, or 1 for an install that failed),
never a traceback. Heavy imports stay in the command bodies.
"""

from __future__ import annotations

from pathlib import Path

import typer

_ALLOW_BUILD = "Build packages that have no wheel from source (runs their build code on this machine)."

env_app = typer.Typer(help="Task test environments: lock, build, list, prune.", no_args_is_help=True)


def _task_dirs(target: Path) -> list[Path]:
    if (target / "task.toml").is_file():
        return [target]
    dirs = sorted(p for p in target.iterdir() if (p / "task.toml").is_file()) if target.is_dir() else []
    if not dirs:
        raise typer.BadParameter(
            f"{target} is neither a task directory nor a folder of them", param_hint="TARGET"
        )
    return dirs


@env_app.command("lock")
def lock(
    target: Path = typer.Argument(
        ..., help="A task directory, or a folder of task directories of one project."
    ),
    project: Path | None = typer.Option(
        None, "--project", help="Read the requirements here (default: the first task's workspace/)."
    ),
    extra: list[str] | None = typer.Option(
        None, "--extra", help="Extras to use instead of test/tests/testing."
    ),
    group: list[str] | None = typer.Option(
        None, "--group", help="Dependency groups to use instead of test/dev."
    ),
    requirements: list[Path] | None = typer.Option(None, "--requirements", help="Requirements files to use."),
    python: str | None = typer.Option(
        None, "--python", help="Python version to lock for (default: inhabit's)."
    ),
    wheelhouse: Path | None = typer.Option(
        None, "--wheelhouse", help="Resolve offline from this folder of wheels."
    ),
    allow_build: bool = typer.Option(False, "--allow-build", help=_ALLOW_BUILD),
) -> None:
    """Resolve the project's declared test requirements to a lock; point each task's environment table at it."""
    from inhabit.envs.lock import lock_requirements
    from inhabit.envs.requirements import project_requirements
    from inhabit.envs.task_env import write_environment

    tasks = _task_dirs(target)
    reqs = project_requirements(
        project or tasks[0] / "workspace", extras=extra, groups=group, requirement_files=requirements
    )
    text = lock_requirements(reqs, python=python, wheelhouse=wheelhouse, allow_build=allow_build)
    for task in tasks:
        eid = write_environment(task, text, python)
    pins = sum(1 for line in text.splitlines() if "==" in line)
    typer.echo(f"locked {len(reqs)} requirement(s) to {pins} pins: {eid} ({len(tasks)} task(s))")


@env_app.command("build")
def build(
    task: Path = typer.Argument(..., help="A task directory with an [environment] table."),
    wheelhouse: Path | None = typer.Option(
        None, "--wheelhouse", help="Install offline from this folder of wheels."
    ),
    allow_build: bool = typer.Option(False, "--allow-build", help=_ALLOW_BUILD),
) -> None:
    """Build (or reuse) the task's environment in the store and say which."""
    import asyncio

    from inhabit.envs.task_env import task_environment
    from inhabit.tasks.task import load_task

    loaded = load_task(task)
    if loaded.environment is None:
        raise typer.BadParameter(
            f"{task} has no [environment] table: run `inhabit env lock` on it", param_hint="TASK"
        )
    built = asyncio.run(task_environment(loaded, wheelhouse=wheelhouse, allow_build=allow_build))
    assert built is not None
    how = "reused" if built.reused else "built"
    typer.echo(f"environment {built.env_id} {how} in {built.install_s:.2f}s at {built.path}")


@env_app.command("list")
def list_envs() -> None:
    """Every environment in the store: id, Python, size, install time."""
    from rich.console import Console
    from rich.table import Table

    from inhabit.envs.store import EnvStore

    store = EnvStore()
    table = Table(title=f"environments in {store.root}")
    table.add_column("id", overflow="fold")  # whole, never cut: it is what `prune --keep` matches
    for col in ("python", "size", "install"):
        table.add_column(col)
    envs = store.list()
    for env in envs:
        table.add_row(env.env_id, env.python, f"{env.size_bytes / 1e6:.1f} MB", f"{env.install_s:.2f}s")
    Console(highlight=False).print(table)
    typer.echo(f"{len(envs)} environment(s)")


@env_app.command("prune")
def prune(
    keep: list[Path] | None = typer.Option(
        None, "--keep", help="Keep the environments that task directories under this folder use (repeatable)."
    ),
) -> None:
    """Remove every environment no kept task uses (all of them without --keep), and failed builds."""
    from inhabit.envs.store import EnvStore
    from inhabit.errors import TaskFormatError
    from inhabit.tasks.task import load_task

    ids: set[str] = set()
    for folder in keep or []:
        for toml in [folder / "task.toml", *folder.rglob("*/task.toml")]:
            if toml.is_file():
                try:
                    spec = load_task(toml.parent).environment
                except TaskFormatError:
                    continue
                if spec is not None:
                    ids.add(spec.id)
    removed = EnvStore().prune(ids)
    for eid in removed:
        typer.echo(f"removed {eid}")
    typer.echo(f"{len(removed)} environment(s) removed, {len(ids)} kept")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    app.add_typer(env_app, name="env")
