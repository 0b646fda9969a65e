"""The environment server: the `Sandbox` interface served over HTTP (FastAPI + uvicorn).

Rollouts on one machine use sandboxes that live on another: `inhabit sandbox env-server` wraps any local
`SandboxProvider` (bwrap, process) and `RemoteSandboxProvider` (remote.py) speaks to it. Routes,
all under `/v1` and all behind `Authorization: Bearer <token>`:

    GET    /health                              backend, sandbox count, size limits, lease
    GET    /metrics (not under /v1)             Prometheus text (server_metrics.py)
    POST   /clients/{client_id}/heartbeat       renew the lease of that client's sandboxes
    GET    /sandboxes                           live sandboxes
    POST   /sandboxes                           JSON {directory | snapshot_id, limits?}
    POST   /sandboxes/upload?limits=<json>      raw tar(.gz) body -> a sandbox of that workspace
    POST   /environments                        JSON {id, python, lock, wheelhouse?}: build or find it
    POST   /wheelhouses                         raw tar(.gz) of .whl files -> {id, wheels}
    GET    /sandboxes/{id}                      info
    DELETE /sandboxes/{id}                      close (idempotent for the client: 404 if gone)
    POST   /sandboxes/{id}/exec                 JSON ExecRequest -> ExecResult (base.py)
    GET    /sandboxes/{id}/files?path=P         raw bytes
    PUT    /sandboxes/{id}/files?path=P         raw body
    DELETE /sandboxes/{id}/files?path=P
    GET    /sandboxes/{id}/list?path=P&recursive=true
    POST   /sandboxes/{id}/snapshot             -> {snapshot_id}
    POST   /sandboxes/{id}/restore              JSON {snapshot_id}

Errors are JSON `{detail, code}` (server_wire.ERROR_CODES). A request without the right token gets
401 before any route runs, so it changes nothing; tokens are compared in constant time. Bodies
are capped while they stream in (413), directory sources must resolve under `--root`, snapshot
ids are this server's own opaque ids (a client cannot name a host path as a "snapshot").

Lifetimes: a client that names itself (`X-Inhabit-Client: <id>`, as `RemoteSandboxProvider`
does) holds a lease on the sandboxes it creates, renewed by any of its requests and by its
heartbeats; a sandbox whose client was silent for `lease_s` and that runs no request is closed
(a client that is alive keeps its sandboxes however long its work takes). Sandboxes of clients
without an id are closed after `idle_ttl_s` without a request. An exec whose client disconnects
is killed at once. On SIGTERM, requests in flight and new ones answer 503 `shutting_down`, then
every sandbox is closed.

What this does NOT protect against: anyone holding the token can run arbitrary code in
sandboxes, so isolation is exactly the backend's (the process backend has none); traffic is
plain HTTP (put TLS in front for untrusted networks); one client can use up `--max-sandboxes`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import os
import posixpath
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import Field, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from inhabit.config import Config
from inhabit.errors import (
    EnvError,
    InhabitError,
    PathOutsideWorkspace,
    SandboxError,
    SandboxLimitExceeded,
    SandboxNotFound,
)
from inhabit.log import get_logger
from inhabit.sandbox import hostfs
from inhabit.sandbox.backends import SANDBOX_BACKENDS, LocalSandboxBackendName
from inhabit.sandbox.base import WORKSPACE_MOUNT, SandboxLimits, SandboxProvider
from inhabit.sandbox.server_metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from inhabit.sandbox.server_metrics import EnvMetrics
from inhabit.sandbox.server_registry import (
    DirectoryNotFound,
    SandboxRegistry,
    TooManySandboxes,
    UnknownSnapshot,
)
from inhabit.sandbox.server_upload import BadUpload
from inhabit.sandbox.server_wire import API_PREFIX, CLIENT_HEADER
from inhabit.serving import ErrorsAsJSON, cap_body, client_disconnected, json_400_protocol, send_json

log = get_logger(__name__)

_MB = 1024 * 1024
# Server-side keep-alive; the client (remote.py) drops idle connections much sooner, so it never
# sends a request on a connection the server is just closing (which would fail a non-retried exec).
KEEP_ALIVE_S = 30


class EnvServerConfig(Config):
    """Settings of one environment server (flags of `inhabit sandbox env-server`)."""

    host: str = Field("127.0.0.1", description="Interface to bind; non-loopback needs a token.")
    port: int = Field(8765, ge=0, le=65535, description="TCP port (0: any free port).")
    token: str | None = Field(
        None, min_length=8, description="Bearer token; else INHABIT_ENV_TOKEN; else a random one."
    )
    backend: LocalSandboxBackendName = Field(
        "auto", description="Sandbox backend the server wraps (one that runs on this machine)."
    )
    root: Path | None = Field(None, description="Directory sources must lie under it; None: none allowed.")
    max_upload_mb: float = Field(64, gt=0, description="Cap on an uploaded (compressed) tarball.")
    max_extracted_mb: float = Field(512, gt=0, description="Cap on the file data an upload unpacks to.")
    max_upload_files: int = Field(50_000, ge=1, description="Cap on the entries of an uploaded tarball.")
    max_file_mb: float = Field(64, gt=0, description="Cap on one file written through the API.")
    max_sandboxes: int = Field(256, ge=1, description="Live sandboxes at once; more get 429.")
    max_concurrent_uploads: int = Field(
        4, ge=1, description="Uploads received and unpacked at once (each may use the caps above)."
    )
    idle_ttl_s: float = Field(
        900, gt=0, description="Sandboxes of clients without an id (no lease) unused this long are closed."
    )
    lease_s: float = Field(
        30,
        gt=0,
        description="Sandboxes whose client sent nothing (not even a heartbeat) this long are closed.",
    )
    reap_interval_s: float = Field(10, gt=0, description="How often the idle reaper looks.")
    spool_dir: Path | None = Field(
        None, description="Where uploads are unpacked; default a tmpfs (/dev/shm) when present."
    )
    env_store: Path | None = Field(
        None, description="The store task environments are built into; default <cache dir>/envs."
    )
    wheelhouses: Path | None = Field(
        None, description="Where uploaded wheelhouses are kept; default <cache dir>/wheelhouses."
    )
    max_wheelhouse_mb: float = Field(
        512, gt=0, description="Cap on an uploaded wheelhouse, compressed and unpacked alike."
    )
    allow_build: bool = Field(
        False,
        description="Build packages without a wheel from source when building a client's lock: "
        "their build code runs on this host, outside any sandbox. Off: wheels only.",
    )


def is_loopback(host: str) -> bool:
    """True when binding `host` exposes the server to this machine only."""
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def check_workspace_path(path: str) -> str:
    """Refuse paths that escape the workspace lexically; the backend also checks symlinks."""
    if "\x00" in path:
        raise PathOutsideWorkspace("paths may not contain NUL bytes")
    norm = posixpath.normpath(path) if path else "."
    if norm.startswith("/"):
        if norm != WORKSPACE_MOUNT and not norm.startswith(WORKSPACE_MOUNT + "/"):
            raise PathOutsideWorkspace(
                f"{path!r} is outside the workspace; use a path relative to it or under {WORKSPACE_MOUNT}"
            )
    elif norm == ".." or norm.startswith("../"):
        raise PathOutsideWorkspace(f"{path!r} escapes the workspace; use a path inside it")
    return path


# ---- auth and body caps (plain ASGI, so they run before any route or body parsing) ------------


def _digest(token: str) -> bytes:
    # Hashing first makes the comparison constant-time in the token's length as well.
    return hashlib.sha256(token.encode()).digest()


class _Guard:
    """401 for requests without the right bearer token; 413 for bodies past their cap."""

    def __init__(
        self,
        app: Any,
        token: str,
        upload_cap: int,
        body_cap: int,
        lifecycle: Lifecycle,
        wheelhouse_cap: int | None = None,
    ) -> None:
        self.app = app
        self.expected = _digest(token)
        self.upload_cap = upload_cap
        self.wheelhouse_cap = wheelhouse_cap or body_cap
        self.body_cap = body_cap
        self.lifecycle = lifecycle

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, send)
            return
        if scope["type"] != "http":  # no websocket routes: refuse rather than route unauthenticated
            await send({"type": "websocket.close", "code": 1008})
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(_digest(given.strip()), self.expected):
            await send_json(
                send,
                401,
                {
                    "detail": "missing or wrong bearer token (send 'Authorization: Bearer <token>')",
                    "code": "unauthorized",
                },
                extra=((b"www-authenticate", b"Bearer"),),
            )
            return
        if self.lifecycle.shutting_down:
            await send_json(send, 503, _shutting_down())
            return
        if (client := headers.get(CLIENT_HEADER)) and self.lifecycle.registry is not None:
            self.lifecycle.registry.heard_from(client[:64])
        path = scope["path"].rstrip("/")
        cap = (
            self.upload_cap
            if path.endswith("/sandboxes/upload")
            else self.wheelhouse_cap
            if path.endswith("/wheelhouses")
            else self.body_cap
        )
        declared = headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > cap:
            await send_json(send, 413, _too_large(cap))
            return
        await self.app(scope, cap_body(receive, cap, _too_large(cap)), send)


def _shutting_down() -> dict[str, str]:
    return {
        "detail": "the env server is shutting down; create the sandbox on another server",
        "code": "shutting_down",
    }


class ShuttingDown(SandboxError):
    """The server is stopping: requests in flight end with 503 `shutting_down`."""


class ClientGone(SandboxError):
    """The client disconnected before its answer was ready (its exec was killed)."""


class Lifecycle:
    """The server's registry once started, and whether it is shutting down (set from a signal)."""

    def __init__(self) -> None:
        self.registry: SandboxRegistry | None = None
        self.stopping: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def started(self, registry: SandboxRegistry) -> None:
        self.registry, self.stopping = registry, asyncio.Event()
        self._loop = asyncio.get_running_loop()

    @property
    def shutting_down(self) -> bool:
        return self.stopping is not None and self.stopping.is_set()

    def begin_shutdown(self) -> None:
        """Safe from a signal handler or another thread."""
        if self._loop is not None and self.stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop is already closed
                self._loop.call_soon_threadsafe(self.stopping.set)

    async def guard(self, request: Request, work: Any) -> Any:
        """Await `work`, cancelling it (which kills a command) if the client leaves or we stop."""
        assert self.stopping is not None
        task = asyncio.ensure_future(work)
        watch = asyncio.ensure_future(client_disconnected(request))
        stop = asyncio.ensure_future(self.stopping.wait())
        try:
            done, _ = await asyncio.wait({task, watch, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            watch.cancel()
            stop.cancel()
        if task in done:
            return task.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if stop in done:
            raise ShuttingDown(_shutting_down()["detail"])
        raise ClientGone("the client disconnected; its command was killed")


def _too_large(cap: int) -> dict[str, str]:
    return {
        "detail": f"request body exceeds this server's cap of {cap} bytes; send less or raise the cap",
        "code": "payload_too_large",
    }


# ---- error mapping ---------------------------------------------------------------------------


def _error(status: int, code: str, detail: str) -> JSONResponse:
    return JSONResponse({"detail": detail, "code": code}, status_code=status)


# A typed error from the backend or the registry -> (status, code); the first class that matches
# wins, so a subclass comes before its base (SandboxNotFound before SandboxError, PermissionError
# before any OSError the table may gain).
_ERROR_STATUS: tuple[tuple[type[BaseException], int, str], ...] = (
    (ShuttingDown, 503, "shutting_down"),
    (ClientGone, 499, "client_closed"),
    (UnknownSnapshot, 404, "snapshot_not_found"),
    (SandboxNotFound, 404, "sandbox_not_found"),
    (DirectoryNotFound, 404, "directory_not_found"),
    (PathOutsideWorkspace, 400, "path_outside_workspace"),
    (TooManySandboxes, 429, "too_many_sandboxes"),
    (SandboxLimitExceeded, 413, "payload_too_large"),
    (BadUpload, 400, "bad_request"),
    (FileNotFoundError, 404, "file_not_found"),
    (IsADirectoryError, 400, "is_a_directory"),
    (NotADirectoryError, 400, "not_a_directory"),
    (PermissionError, 403, "permission_denied"),
    (SandboxError, 400, "sandbox_error"),
    (EnvError, 400, "environment_error"),  # a lock that does not build here (hash, registry, wheelhouse)
    (ValueError, 400, "bad_request"),
)


def _detail(exc: Exception) -> str:
    msg = str(exc) or type(exc).__name__
    if isinstance(exc, FileNotFoundError):
        return f"no such file in the workspace: {exc.filename or msg}"
    if isinstance(exc, PermissionError):
        return f"permission denied in the workspace: {exc.strerror or msg}"
    return msg


def _map_error(exc: Exception) -> JSONResponse:
    """Turn a typed error from the backend or the registry into a status and a code (_ERROR_STATUS)."""
    for cls, status, code in _ERROR_STATUS:
        if isinstance(exc, cls):
            return _error(status, code, _detail(exc))
    log.exception("env-server: unexpected error", exc_info=exc)
    return _error(
        500, "internal", f"internal error ({type(exc).__name__}: {_detail(exc)}); see the server log"
    )


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        parts = []
        for err in exc.errors():
            if err.get("type") == "json_invalid":
                reason = (err.get("ctx") or {}).get("error", "")
                parts.append(f"the body is not valid JSON ({reason})".replace(" ()", ""))
                continue
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg')}")
        return _error(422, "validation", "invalid request: " + "; ".join(parts))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if isinstance(exc.detail, dict):  # our own 413 from the body cap
            return JSONResponse(exc.detail, status_code=exc.status_code)
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "bad_request")
        detail = str(exc.detail)
        if exc.status_code in (404, 405):
            detail = f"{detail}: {request.method} {request.url.path} (routes live under {API_PREFIX}/)"
        return _error(exc.status_code, code, detail)

    async def _typed(request: Request, exc: Exception) -> JSONResponse:
        where = request.query_params.get("path", "")
        if isinstance(exc, FileNotFoundError):  # name the workspace path, never the host path
            return _error(404, "file_not_found", f"no such file in the workspace: {where!r}")
        if isinstance(exc, OSError) and not isinstance(exc, PermissionError) and exc.errno is not None:
            # A file error's own text holds the host path: say what failed on the workspace path.
            reason = exc.strerror or type(exc).__name__
            code = {IsADirectoryError: "is_a_directory", NotADirectoryError: "not_a_directory"}.get(
                type(exc), "bad_request"
            )
            return _error(400, code, f"{reason}: {where!r} in the workspace")
        return _map_error(exc)

    # Specific classes (not Exception) so Starlette answers them without logging a crash.
    # InhabitError covers SandboxError and EnvError (a task's lock that does not build here: 400).
    for cls in (
        InhabitError,
        FileNotFoundError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
        OSError,
        ValueError,
    ):
        app.add_exception_handler(cls, _typed)

    # Anything else: a JSON 500 from a middleware that keeps the connection (Starlette's own
    # last-resort handler re-raises to uvicorn, which drops it, failing the client's next request).
    app.add_middleware(
        ErrorsAsJSON,
        body_of=lambda exc: {
            "detail": f"internal error ({type(exc).__name__}); see the server log",
            "code": "internal",
        },
    )


# ---- the app ---------------------------------------------------------------------------------


ProviderFactory = Callable[[], SandboxProvider]


def make_provider_factory(backend: str) -> ProviderFactory:
    """A factory of the named local backend (built inside the server's event loop)."""
    from inhabit.sandbox import SandboxConfig, create_provider

    SANDBOX_BACKENDS.check(backend, local_only=True)
    config = SandboxConfig(backend=backend)

    def factory() -> SandboxProvider:
        return create_provider(config)

    return factory


def create_app(
    provider_factory: ProviderFactory,
    config: EnvServerConfig,
    token: str,
    on_ready: Callable[[], None] | None = None,
) -> FastAPI:
    """Build the ASGI app; the provider is made at startup, inside the serving event loop.

    `on_ready` runs once the provider exists (the command announces "serving" there).
    `app.state.lifecycle.begin_shutdown()` makes requests in flight answer 503 at once.
    """
    from inhabit.sandbox.server_routes import add_routes

    state: dict[str, Any] = {}
    lifecycle = Lifecycle()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # tmpfs by default: unpacking hundreds of small files on a disk-backed /tmp costs ms each.
        scratch = config.spool_dir or hostfs.default_scratch_dir()
        # A server killed with SIGKILL could not remove its spool: its pid in the name says so.
        hostfs.sweep_stale(Path(scratch), "inhabit-env-server-")
        spool = hostfs.make_private_dir(scratch, f"inhabit-env-server-{os.getpid()}-")
        provider = provider_factory()
        registry = SandboxRegistry(provider, config, spool)
        backend_name = getattr(provider, "backend", config.backend)
        if backend_name != config.backend:
            config.backend = backend_name  # report what 'auto' chose
        state["registry"] = registry
        lifecycle.started(registry)

        async def reaper() -> None:
            # Often enough that a silent client's sandboxes go within about one lease.
            interval = min(config.reap_interval_s, config.lease_s / 4)
            while True:
                await asyncio.sleep(interval)
                try:
                    await registry.reap()
                except Exception:  # one failed sweep must not stop reaping for good
                    log.exception("env-server: idle reaping failed; retrying next interval")

        reap_task = asyncio.create_task(reaper(), name="env-server-reaper")
        log.info("env-server: serving backend %s", config.backend)
        if on_ready is not None:
            on_ready()
        try:
            yield
        finally:
            lifecycle.begin_shutdown()
            reap_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reap_task
            await registry.close_all()
            with contextlib.suppress(Exception):
                await provider.close()
            shutil.rmtree(spool, ignore_errors=True)
            log.info("env-server: all sandboxes closed")

    app = FastAPI(title="inhabit sandbox env-server", lifespan=lifespan, docs_url=None, redoc_url=None)
    _install_error_handlers(app)
    add_routes(app, lambda: state["registry"], config, lifecycle)
    metrics = EnvMetrics(lambda: state.get("registry"))

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    body_cap = int(2 * config.max_file_mb * _MB) + _MB  # a file, or exec stdin as base64 in JSON
    app.add_middleware(
        _Guard,
        token=token,
        upload_cap=int(config.max_upload_mb * _MB),
        body_cap=body_cap,
        lifecycle=lifecycle,
        wheelhouse_cap=int(config.max_wheelhouse_mb * _MB),
    )
    app.add_middleware(_Observed, metrics=metrics)  # outermost: sees 401s and 413s too
    app.state.lifecycle = lifecycle
    return app


class _Observed:
    def __init__(self, app: Any, metrics: EnvMetrics) -> None:
        self.observed = metrics.middleware(app)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        await self.observed(scope, receive, send)


def uvicorn_server(app: FastAPI, graceful_s: float = 10) -> Any:
    """A uvicorn server whose SIGTERM/SIGINT first makes requests in flight answer 503."""
    import uvicorn

    class _Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            app.state.lifecycle.begin_shutdown()
            super().handle_exit(sig, frame)

    return _Server(
        uvicorn.Config(
            app,
            log_level="warning",
            lifespan="on",
            timeout_graceful_shutdown=graceful_s,
            timeout_keep_alive=KEEP_ALIVE_S,
            # A request uvicorn cannot parse gets this server's JSON error too, not plain text.
            http=json_400_protocol(
                lambda reason: {"detail": f"malformed HTTP request: {reason}", "code": "bad_request"}
            ),
        )
    )


def parse_limits(raw: str | None) -> SandboxLimits | None:
    """Limits given as a JSON query parameter (upload route); ValueError maps to 400."""
    if raw is None:
        return None
    try:
        return SandboxLimits.model_validate_json(raw)
    except ValidationError as e:
        raise ValueError(f"invalid limits: {e.errors()[0].get('msg')}") from e


# ---- running it ------------------------------------------------------------------------------


class BackgroundServer:
    """A real env server on 127.0.0.1 in a background thread (tests, notebooks, one-box runs).

    with BackgroundServer(ProcessSandboxProvider, token="secret-token") as srv:
        provider = RemoteSandboxProvider(srv.url, "secret-token")

    Server and client then share one process (and its GIL): fine for tests, but deploy
    `inhabit sandbox env-server` as its own process.
    """

    def __init__(
        self, provider_factory: ProviderFactory, *, token: str, config: EnvServerConfig | None = None
    ) -> None:
        self.config = config or EnvServerConfig(token=token)
        self.token = token
        # IPPROTO_TCP explicitly: asyncio only sets TCP_NODELAY on accepted sockets whose proto
        # says TCP, and without it every response stalls ~40 ms on delayed ACKs.
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))  # loopback only, any free port
        self.port = self._sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = create_app(provider_factory, self.config, token)
        self._server = uvicorn_server(self.app, graceful_s=5)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )

    def start(self, timeout_s: float = 20.0) -> BackgroundServer:
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise SandboxError("the background env server did not start; see the log above")
            time.sleep(0.01)
        return self

    def stop(self, timeout_s: float = 30.0) -> None:
        self.app.state.lifecycle.begin_shutdown()
        self._server.should_exit = True
        self._thread.join(timeout_s)
        self._sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
