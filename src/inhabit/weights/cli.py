"""`inhabit weights serve|pull|verify|log|gc`: weight stores for operators (heavy imports stay inside commands).

inhabit weights serve runs/weights --port 8470          # read-only HTTP for subscribers
inhabit weights pull http://host:8470 --out model/      # newest version -> safetensors folder
inhabit weights verify runs/weights                     # every manifest and shard checksum
inhabit weights log runs/weights                        # versions, kinds, sizes, ratios
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

weights_app = typer.Typer(
    name="weights", help="Weight stores: serve, pull, verify, inspect.", no_args_is_help=True
)


def _open_store(url: str) -> Any:
    """The store at `url`, which must exist and answer (a WeightsError saying which it does not)."""
    from inhabit.errors import WeightsError
    from inhabit.weights.store import Store, StoreUnreachable

    try:
        store = Store(url)
        store.fs.ls(store.root, detail=False)
        if store.is_local and not store.fs.isdir(store.root):  # a local file lists as itself
            raise NotADirectoryError(url)
    except FileNotFoundError:
        raise WeightsError(f"no weight store at {url}: nothing is there (check the path or URL)") from None
    except NotADirectoryError:
        raise WeightsError(f"{url} is a file, not a weight store (a folder of versions)") from None
    except Exception as e:  # each fsspec backend raises its own network errors (aiohttp, botocore, ...)
        raise StoreUnreachable(f"cannot reach the weight store {url} ({type(e).__name__}: {e})") from e
    return store


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    app.add_typer(weights_app, name="weights")


@weights_app.command()
def serve(
    store: str = typer.Argument(..., help="Store directory or fsspec URL to serve."),
    host: str = typer.Option("127.0.0.1", help="Interface to bind (loopback by default; no auth)."),
    port: int = typer.Option(8470, help="TCP port (0 picks a free one)."),
) -> None:
    """Serve a store read-only over HTTP (subscribers pull it with fsspec's http filesystem)."""
    from inhabit.errors import WeightsError
    from inhabit.weights.serve import StoreServer

    _open_store(store)
    try:
        server = StoreServer(store, host=host, port=port)
    except OSError as e:
        raise WeightsError(f"cannot listen on {host}:{port} ({e.strerror or e}); pick another --port") from e
    typer.echo(f"serving {store} at {server.url} (read-only; Ctrl-C stops)", err=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()


@weights_app.command()
def pull(
    url: str = typer.Argument(..., help="Store URL (http://, s3://, memory://) or directory."),
    out: Path = typer.Option(..., "--out", help="Folder to write model.safetensors into."),
    version: int | None = typer.Option(None, "--version", help="Version to reconstruct (default newest)."),
    cache: Path | None = typer.Option(
        None,
        "--cache",
        help="Shard cache that makes an interrupted pull resume (default OUT/.weights-cache).",
    ),
    workers: int = typer.Option(8, help="Parallel downloads."),
) -> None:
    """Reconstruct one version (full snapshot + deltas) into a safetensors folder."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeRemainingColumn
    from safetensors.torch import save_file

    from inhabit.errors import WeightsError
    from inhabit.weights.subscribe import Subscriber, SubscriberConfig

    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} is a file, not a folder", param_hint="--out")
    store = _open_store(url)
    out.mkdir(parents=True, exist_ok=True)
    config = SubscriberConfig(name="pull", cache_dir=str(cache or out / ".weights-cache"), workers=workers)
    sub = Subscriber(store, config)
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(), TimeRemainingColumn()
    ) as progress:
        task = progress.add_task("shards", total=None)

        def on_manifest(manifest) -> None:
            total = (progress.tasks[task].total or 0) + manifest.encoded_bytes
            progress.update(task, total=total, description=f"version {manifest.version} ({manifest.kind})")

        sub.on_manifest = on_manifest
        sub.on_shard = lambda shard: progress.advance(task, shard.size)
        try:
            result = sub.sync(version)
        except WeightsError:
            raise
        except Exception as e:  # network errors: what is fetched stays in the cache
            raise WeightsError(
                f"download interrupted ({type(e).__name__}: {e}); run the same command again to resume"
            ) from e
    if result.version is None and result.error is None:
        raise WeightsError(f"{url} holds no published version yet")
    if not result.reached:
        raise WeightsError(f"could not reconstruct version {result.target}: {result.error}")
    state = {k: v.contiguous() for k, v in sub.state_dict().items()}
    target = out / "model.safetensors"
    save_file(state, str(target), metadata={"inhabit_weights_version": str(result.version)})
    typer.echo(
        f"version {result.version}: {len(state)} tensors -> {target} "
        f"(fetched {result.stats.fetched_bytes / 1e6:.1f} MB, {result.stats.cached_shards} shards from cache)"
    )


@weights_app.command()
def verify(
    store: str = typer.Argument(..., help="Store directory or fsspec URL."),
    version: int | None = typer.Option(None, "--version", help="Check only this version."),
    deep: bool = typer.Option(False, help="Also decode every version and check every tensor checksum."),
) -> None:
    """Check every manifest and shard checksum; exit 1 if anything is corrupt or missing."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from inhabit.weights.verify import verify_store

    problems, checked = verify_store(_open_store(store), version, deep=deep)
    console = Console()
    if problems:
        table = Table("version", "problem")
        for v, message in problems:
            table.add_row(str(v), escape(message))
        console.print(table)
        console.print(f"[red]{len(problems)} problem(s) in {checked} version(s)[/red]")
        raise typer.Exit(1)
    console.print(f"[green]{checked} version(s) verified, no problems[/green]")


@weights_app.command("log")
def log_cmd(store: str = typer.Argument(..., help="Store directory or fsspec URL.")) -> None:
    """Table of versions: kind, parent, sizes and compression ratio."""
    import datetime as dt

    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from inhabit.errors import WeightsError

    s = _open_store(store)
    table = Table(
        "version", "kind", "parent", "chain", "tensors", "changed", "raw MB", "stored MB", "ratio", "created"
    )
    console = Console(width=max(Console().width, 120))
    for v in s.versions():
        try:
            m = s.manifest(v)
        except WeightsError as e:
            table.add_row(str(v), "[red]corrupt[/red]", "", "", "", "", "", "", "", escape(str(e)[:40]))
            continue
        numel = sum(t.numel for t in m.tensors) or 1
        changed = sum(t.changed for t in m.tensors)
        table.add_row(
            str(v),
            m.kind,
            "-" if m.parent is None else str(m.parent),
            str(m.chain),
            str(len(m.tensors)),
            f"{100 * changed / numel:.2f}%",
            f"{m.raw_bytes / 1e6:.2f}",
            f"{m.encoded_bytes / 1e6:.3f}",
            f"{m.raw_bytes / max(1, m.encoded_bytes):.1f}x",
            dt.datetime.fromtimestamp(m.created).strftime("%m-%d %H:%M:%S"),
        )
    leases = s.leases()
    console.print(table)
    if leases:
        console.print(
            "leases: " + ", ".join(f"{lease.name}@{lease.version}" for lease in leases), markup=False
        )


@weights_app.command()
def gc(
    store: str = typer.Argument(..., help="Store directory or fsspec URL."),
    keep_chains: int = typer.Option(2, help="Newest chains to keep (leased chains are always kept)."),
) -> None:
    """Delete old chains that no subscriber holds, and leftovers of publishes that died."""
    deleted = _open_store(store).gc(keep_chains)
    typer.echo(f"deleted {len(deleted)} version(s){': ' + ', '.join(map(str, deleted)) if deleted else ''}")
