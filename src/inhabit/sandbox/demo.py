"""The sandbox demo (`inhabit sandbox demo`): a short tour of what a sandbox does and what it costs.

It builds a tiny repository with a failing test, starts a sandbox on the default backend, runs
the tests inside, fixes the bug through the file API, snapshots, breaks it again and restores,
and shows the isolation at work: a TCP listener on the host's loopback cannot be reached, and a
file the demo writes on the host cannot be read. Every step is timed and printed with rich.
"""

from __future__ import annotations

import asyncio
import secrets
import socket
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from inhabit.sandbox import SandboxConfig, create_provider

_CALC = "def add(a, b):\n    return a - b\n"
_TEST = (
    "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_add_zero():\n    assert add(0, 0) == 0\n"
)


def _make_repo(root: Path) -> Path:
    repo = root / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "calc.py").write_text(_CALC)
    (repo / "tests" / "test_calc.py").write_text(_TEST)
    (repo / "conftest.py").write_text("import sys, os\nsys.path.insert(0, os.path.dirname(__file__))\n")
    return repo


async def run_demo(config: SandboxConfig | None = None) -> None:
    """Run the demo on `config`'s backend (default: auto) and print what happened."""
    console = Console()
    timings: list[tuple[str, float, str]] = []

    async def step(label: str, coro, note=lambda r: ""):  # type: ignore[no-untyped-def]
        t = time.perf_counter()
        result = await coro
        timings.append((label, (time.perf_counter() - t) * 1000, note(result)))
        return result

    with tempfile.TemporaryDirectory(prefix="inhabit-demo-") as tmp:
        repo = _make_repo(Path(tmp))
        secret = Path(tmp) / "host-secret.txt"
        secret.write_text("host secret " + secrets.token_hex(4))
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        port = listener.getsockname()[1]
        provider = create_provider(config)
        try:
            sb = await step("create sandbox from directory", provider.create(repo))
            info = sb.info
            console.print(
                f"[bold]backend:[/] {info.backend}  isolated: "
                + ("[green]yes[/]" if info.isolated else "[bold red]NO (process backend isolates nothing)[/]")
            )
            if hasattr(provider, "describe"):
                console.print(f"[dim]{provider.describe()}[/]")
            await step("exec: python3 -c pass", sb.exec(["python3", "-c", "pass"]))
            await step(
                "exec: pytest (bug present)",
                sb.exec("python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -1"),
                lambda r: r.stdout.strip(),
            )
            await step("write_file: fix calc.py", sb.write_file("calc.py", _CALC.replace("a - b", "a + b")))
            await step(
                "exec: pytest (fixed)",
                sb.exec("python3 -m pytest -q -p no:cacheprovider 2>&1 | tail -1"),
                lambda r: r.stdout.strip(),
            )
            snap = await step("snapshot", sb.snapshot(), lambda s: s)
            await sb.write_file("calc.py", "broken = True\n")
            await step("restore snapshot", sb.restore(snap))
            content = await sb.read_file("calc.py")
            timings.append(("calc.py after restore", 0.0, content.decode().splitlines()[1].strip()))
            other = await step("create sandbox from snapshot", provider.create(snap))
            await other.close()
            code = (
                f"import socket\ntry:\n socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
                " print('connected to host loopback')\nexcept OSError as e:\n print('refused:', e)"
            )
            await step(
                "network: connect to host loopback",
                sb.exec(["python3", "-c", code]),
                lambda r: "refused" if "refused" in r.stdout else "CONNECTED (not isolated)",
            )
            await step(
                "host file outside the workspace",
                sb.exec(f"cat {secret} 2>&1 || true"),
                lambda r: "READABLE (not isolated)" if "host secret" in r.stdout else "not visible",
            )
            source_untouched = (repo / "calc.py").read_text() == _CALC
            timings.append(("source directory untouched", 0.0, str(source_untouched)))
            await step("close sandbox", sb.close())
        finally:
            listener.close()
            await provider.close()

    table = Table(title="inhabit sandbox demo")
    table.add_column("step")
    table.add_column("ms", justify="right")
    table.add_column("result")
    for label, ms, note in timings:
        table.add_row(label, f"{ms:.1f}" if ms else "", note)
    console.print(table)


if __name__ == "__main__":
    asyncio.run(run_demo())
