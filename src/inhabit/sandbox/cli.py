"""`inhabit sandbox ...`: check what isolation this host supports, run the demo, run a command.

    inhabit sandbox doctor             which backend, workspace mode and limit mechanism work here
    inhabit sandbox demo               tests inside, file API, snapshot/restore, isolation, timings
    inhabit sandbox run DIR -- CMD...  run one command in a throwaway sandbox over DIR

Heavy work stays inside command bodies so `inhabit --help` stays fast.
"""

from __future__ import annotations

import typer

sandbox_app = typer.Typer(help="Isolated workspaces: check the host, run the demo, run a command.")


@sandbox_app.command()
def doctor() -> None:
    """Report which sandbox backend and limit mechanisms work on this host."""
    import os

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from inhabit.sandbox import bwrap, cgroups, hostfs

    console = Console()
    table = Table(title="inhabit sandbox doctor", show_header=False)
    binary = bwrap.bwrap_binary()
    problem = bwrap.bwrap_problem()
    table.add_row("bwrap binary", escape(str(binary)) if binary else "[red]missing[/]")
    table.add_row("bwrap namespaces", "[green]work[/]" if problem is None else f"[red]{escape(problem)}[/]")
    table.add_row("running as", "root" if os.geteuid() == 0 else f"uid {os.geteuid()} (unprivileged)")
    table.add_row(
        "workspace mode",
        "overlay (kernel overlayfs on per-sandbox tmpfs)"
        if bwrap.can_mount()
        else "copy (overlay needs root: not root here)",
    )
    manager = cgroups.detect()
    table.add_row(
        "limits",
        manager.description
        if manager
        else "rlimits only (RLIMIT_AS, RLIMIT_NPROC, RLIMIT_CPU, RLIMIT_FSIZE)",
    )
    if manager is not None:
        manager.close()
    table.add_row("scratch dir", escape(str(hostfs.default_scratch_dir())))
    if problem is None:
        import asyncio

        provider = bwrap.BwrapSandboxProvider()
        table.add_row(
            "sandbox processes run as", f"host uid {provider.owner[0] if provider.owner else os.geteuid()}"
        )
        table.add_row("provider", provider.describe())
        asyncio.run(provider.close())
    default = "bwrap" if problem is None else "process ([bold red]isolates nothing[/])"
    table.add_row("default backend (auto)", default)
    console.print(table)


@sandbox_app.command()
def demo(
    backend: str = typer.Option("auto", help="auto, bwrap or process."),
) -> None:
    """Run the sandbox demo: tests inside, file API, snapshot/restore, isolation, timings."""
    import asyncio

    from inhabit.sandbox import SandboxConfig
    from inhabit.sandbox.demo import run_demo

    asyncio.run(run_demo(SandboxConfig(backend=backend)))  # type: ignore[arg-type]


@sandbox_app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    ctx: typer.Context,
    directory: str = typer.Argument(..., help="Host directory to copy-on-write into the sandbox."),
    backend: str = typer.Option("auto", help="auto, bwrap or process."),
    timeout: float = typer.Option(60.0, help="Wall-clock limit in seconds."),
) -> None:
    """Run a command (after `--`) in a throwaway sandbox over DIRECTORY; exit with its code."""
    import asyncio
    import sys

    from inhabit.errors import SandboxError
    from inhabit.sandbox import SandboxConfig, create_provider

    argv = list(ctx.args)
    if not argv:
        raise SandboxError("give a command after --, e.g. inhabit sandbox run . -- python3 -m pytest -q")

    async def go() -> int:
        provider = create_provider(SandboxConfig(backend=backend))  # type: ignore[arg-type]
        try:
            async with await provider.create(directory) as sb:
                r = await sb.exec(argv, timeout_s=timeout)
        finally:
            await provider.close()
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        if r.timed_out:
            sys.stderr.write(f"[inhabit] timed out after {timeout} s\n")
        return 124 if r.timed_out else (r.exit_code if r.exit_code >= 0 else 128 - r.exit_code)

    raise typer.Exit(asyncio.run(go()))


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    app.add_typer(sandbox_app, name="sandbox")
