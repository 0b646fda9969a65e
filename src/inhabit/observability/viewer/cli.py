"""The `inhabit view` command: serve the run viewer (heavy imports stay inside the body).

Binds 127.0.0.1 by default. Any other host needs a token (`--token` or INHABIT_VIEW_TOKEN),
as `inhabit sandbox env-server` does, since run folders hold code, prompts and model output.
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""

    @app.command("view")
    def view(
        run_dirs: list[Path] = typer.Argument(
            ..., help="Run folders, or folders holding runs (searched two levels down)."
        ),
        host: str = typer.Option("127.0.0.1", help="Interface to bind; anything but loopback needs a token."),
        port: int = typer.Option(8700, help="TCP port."),
        token: str | None = typer.Option(
            None,
            envvar="INHABIT_VIEW_TOKEN",
            help="Token the browser must send (?token=... once; >= 8 chars).",
        ),
    ) -> None:
        """Browse runs in a web page: curves (live), episodes turn by turn, evaluations."""
        import uvicorn

        from inhabit.errors import ConfigError
        from inhabit.observability.viewer.app import create_app
        from inhabit.observability.viewer.runs import discover
        from inhabit.sandbox.server import is_loopback

        missing = [str(p) for p in run_dirs if not p.is_dir()]
        if missing:
            raise ConfigError(
                f"not a folder: {', '.join(missing)}; give run folders (or folders holding runs)"
            )
        if not discover(run_dirs):
            raise ConfigError(
                f"no run folder in {', '.join(map(str, run_dirs))}: a run folder holds config.json, "
                "metrics.jsonl or trajectories.jsonl (inhabit train writes them to run_dir)"
            )
        if token and len(token) < 8:
            raise ConfigError("--token must be at least 8 characters")
        if not token and not is_loopback(host):
            raise ConfigError(
                f"refusing to serve on non-loopback host {host!r} without a token: "
                "pass --token or set INHABIT_VIEW_TOKEN"
            )
        app_ = create_app(run_dirs, token or None)
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        typer.echo(f"view: http://{shown}:{port}/ ({len(discover(run_dirs))} runs)", err=True)
        uvicorn.run(app_, host=host, port=port, log_level="warning")
