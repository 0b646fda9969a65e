"""`inhabit sandbox ...`: check what isolation this host supports, run the demo, run a command.

    inhabit sandbox doctor             which backend, workspace mode and limit mechanism work here
    inhabit sandbox demo               tests inside, file API, snapshot/restore, isolation, timings
    inhabit sandbox run DIR -- CMD...  run one command in a throwaway sandbox over DIR

Heavy work stays inside command bodies so `inhabit --help` stays fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

import typer

from inhabit.sandbox.backends import SANDBOX_BACKENDS

if TYPE_CHECKING:
    from inhabit.sandbox.base import ExecResult

sandbox_app = typer.Typer(
    help="Isolated workspaces: check the host, run the demo, run a command, serve them (env-server)."
)


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
    backend: str = typer.Option("auto", help=f"{SANDBOX_BACKENDS.choices(local_only=True)}."),
) -> None:
    """Run the sandbox demo: tests inside, file API, snapshot/restore, isolation, timings."""
    import asyncio

    from inhabit.sandbox import SandboxConfig
    from inhabit.sandbox.demo import run_demo

    SANDBOX_BACKENDS.check(backend, local_only=True)
    asyncio.run(run_demo(SandboxConfig(backend=backend)))


@sandbox_app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    ctx: typer.Context,
    directory: str = typer.Argument(..., help="Host directory to copy-on-write into the sandbox."),
    backend: str = typer.Option("auto", help=f"{SANDBOX_BACKENDS.choices(local_only=True)}."),
    timeout: float = typer.Option(60.0, help="Wall-clock limit in seconds."),
    output_bytes: int = typer.Option(
        1_000_000, help="Cap on captured stdout and on stderr, each; the rest is dropped and marked."
    ),
) -> None:
    """Run a command (after `--`) in a throwaway sandbox over DIRECTORY; exit with its code.

    stdout and stderr are replayed in the order the command wrote them (as the two pipes
    delivered it). Output past --output-bytes is cut with a marker line, and the exit code is
    then 121 where the command itself exited 0, so a cut can never pass for a clean run.
    """
    import asyncio
    import sys

    from inhabit.errors import SandboxError
    from inhabit.sandbox import SandboxConfig, SandboxLimits, create_provider

    argv = list(ctx.args)
    if not argv:
        raise SandboxError("give a command after --, e.g. inhabit sandbox run . -- python3 -m pytest -q")
    SANDBOX_BACKENDS.check(backend, local_only=True)

    async def go() -> int:
        provider = create_provider(SandboxConfig(backend=backend))
        limits = SandboxLimits(output_bytes=output_bytes)
        try:
            async with await provider.create(directory, limits=limits) as sb:
                r = await sb.exec(argv, timeout_s=timeout)
        finally:
            await provider.close()
        replay_output(r, sys.stdout, sys.stderr)
        for name, cut in (("stdout", r.stdout_truncated), ("stderr", r.stderr_truncated)):
            if cut:
                sys.stderr.write(
                    f"[inhabit] {name} cut at {output_bytes} bytes; the rest was dropped "
                    "(raise --output-bytes to see it)\n"
                )
        if r.timed_out:
            sys.stderr.write(f"[inhabit] timed out after {timeout} s\n")
            return 124
        code = r.exit_code if r.exit_code >= 0 else 128 - r.exit_code
        if code == 0 and (r.stdout_truncated or r.stderr_truncated):
            return TRUNCATED_EXIT
        return code

    raise typer.Exit(asyncio.run(go()))


TRUNCATED_EXIT = 121
"""`inhabit sandbox run`'s exit code when the command succeeded but its output was cut."""


def replay_output(r: ExecResult, out: TextIO, err: TextIO) -> None:
    """Write a result's stdout and stderr to `out`/`err` in the order they were produced.

    Where the backend did not record the order (a remote sandbox), all of stdout comes first
    and a line on `err` says so.
    """
    if not r.output_order:
        out.write(r.stdout)
        out.flush()
        if r.stdout and r.stderr:
            err.write("[inhabit] stdout and stderr shown separately (order not recorded)\n")
        err.write(r.stderr)
        return
    pos = {1: 0, 2: 0}
    texts = {1: r.stdout, 2: r.stderr}
    streams = {1: out, 2: err}
    for fd, n in r.output_order:
        streams[fd].write(texts[fd][pos[fd] : pos[fd] + n])
        streams[fd].flush()
        pos[fd] += n


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    app.add_typer(sandbox_app, name="sandbox")
