"""The `inhabit sandbox env-server` command: serve sandboxes over HTTP (heavy imports stay inside the body).

It refuses to bind a non-loopback host without a token. On loopback without one, it makes a
random token and prints it once to stderr, so every request is still authenticated. It binds the
port first (a taken port is one clear error), then starts the sandbox backend, then announces.
"""

from __future__ import annotations

from pathlib import Path

import typer

from inhabit.sandbox.backends import SANDBOX_BACKENDS


def register(app: typer.Typer) -> None:
    """Add `inhabit sandbox env-server` (and its hidden older spelling `inhabit sandbox env-server`)."""
    from inhabit.sandbox.cli import sandbox_app

    @sandbox_app.command("env-server")
    @app.command("env-server", hidden=True)  # the spelling of earlier releases, kept for scripts
    def env_server(
        host: str = typer.Option("127.0.0.1", help="Interface to bind; anything but loopback needs a token."),
        port: int = typer.Option(8765, help="TCP port."),
        token: str | None = typer.Option(
            None, envvar="INHABIT_ENV_TOKEN", help="Bearer token clients must send (>= 8 chars)."
        ),
        backend: str = typer.Option(
            "auto", help=f"Sandbox backend: {SANDBOX_BACKENDS.choices(local_only=True)}."
        ),
        root: Path | None = typer.Option(
            None, help="Clients may create sandboxes from directories under this one ('server:<dir>')."
        ),
        max_upload_mb: float = typer.Option(64, help="Cap on an uploaded workspace tarball."),
        max_extracted_mb: float = typer.Option(512, help="Cap on what an upload unpacks to."),
        max_file_mb: float = typer.Option(64, help="Cap on one file written through the API."),
        max_sandboxes: int = typer.Option(256, help="Live sandboxes at once."),
        idle_ttl_s: float = typer.Option(
            900, help="Close sandboxes of clients without an id that no request touched for this long."
        ),
        lease_s: float = typer.Option(
            30, help="Close sandboxes whose client sent nothing, heartbeats included, for this long."
        ),
        max_wheelhouse_mb: float = typer.Option(512, help="Cap on an uploaded wheelhouse (tar of wheels)."),
        allow_build: bool = typer.Option(
            False,
            "--allow-build",
            help="Build packages of clients' locks that have no wheel (their build code runs on this host).",
        ),
    ) -> None:
        """Serve the sandbox interface over HTTP so rollouts on other machines can use it."""
        import secrets

        from inhabit.config import validate_config
        from inhabit.errors import ConfigError
        from inhabit.sandbox.server import (
            EnvServerConfig,
            create_app,
            is_loopback,
            make_provider_factory,
            uvicorn_server,
        )
        from inhabit.serving import bind_socket

        if root is not None and not root.is_dir():
            raise ConfigError(f"--root {root} is not a directory: give the folder that holds task workspaces")
        generated = False
        if not token:
            if not is_loopback(host):
                raise ConfigError(
                    f"refusing to serve on non-loopback host {host!r} without a token: "
                    "pass --token or set INHABIT_ENV_TOKEN"
                )
            token = secrets.token_urlsafe(24)
            generated = True
        config = validate_config(
            EnvServerConfig,
            {
                "host": host,
                "port": port,
                "token": token,
                "backend": backend,
                "root": root,
                "max_upload_mb": max_upload_mb,
                "max_extracted_mb": max_extracted_mb,
                "max_file_mb": max_file_mb,
                "max_sandboxes": max_sandboxes,
                "idle_ttl_s": idle_ttl_s,
                "lease_s": lease_s,
                "max_wheelhouse_mb": max_wheelhouse_mb,
                "allow_build": allow_build,
            },
            source="env-server options",
        )
        factory = make_provider_factory(config.backend)
        sock = bind_socket(host, port, "env-server")
        bound = sock.getsockname()[1]
        if generated:  # only once the port is ours: a failed start prints its one error line alone
            typer.echo(f"env-server: no token given; clients must send INHABIT_ENV_TOKEN={token}", err=True)

        def announce() -> None:
            typer.echo(f"env-server: serving on http://{host}:{bound} (backend {config.backend})", err=True)

        app_ = create_app(factory, config, token, on_ready=announce)
        uvicorn_server(app_, graceful_s=10).run(sockets=[sock])
