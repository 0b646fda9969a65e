"""The routes of the environment server (see server.py for the list, the auth and the errors).

Each route resolves its sandbox through the registry (404 if unknown), checks paths lexically
(400 if they escape the workspace; the backend checks symlinks too) and lets typed errors rise
to the handlers in server.py, which turn them into a status and a JSON `{detail, code}`.

What this does NOT protect against: see server.py; routes add no isolation of their own.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from fastapi import APIRouter, FastAPI, Query, Request, Response

from inhabit.errors import PathOutsideWorkspace, SandboxLimitExceeded, SandboxNotFound
from inhabit.sandbox.base import ExecResult, SandboxLimits
from inhabit.sandbox.server import EnvServerConfig, Lifecycle, check_workspace_path, parse_limits
from inhabit.sandbox.server_registry import DirectoryNotFound, SandboxRegistry
from inhabit.sandbox.server_upload import unpack_tarball
from inhabit.sandbox.server_wheels import store_wheelhouse, wheelhouse_path
from inhabit.sandbox.server_wire import (
    API_PREFIX,
    CLIENT_HEADER,
    EXEC_OUT_EXCLUDE,
    CreateRequest,
    EnvironmentIn,
    EnvironmentOut,
    ExecRequest,
    FileEntryOut,
    HealthOut,
    RestoreRequest,
    SandboxOut,
    SnapshotOut,
    WheelhouseOut,
)

_MB = 1024 * 1024


def _out(registry: SandboxRegistry, sandbox_id: str) -> SandboxOut:
    import time

    entry = registry.get(sandbox_id)
    info = entry.sandbox.info
    return SandboxOut(
        sandbox_id=sandbox_id,
        backend=info.backend,
        isolated=info.isolated,
        limits=info.limits,
        idle_s=0.0 if entry.active else time.monotonic() - entry.last_used,
        active_requests=entry.active,
        lease_s=registry.config.lease_s if entry.client is not None else None,
    )


def _resolve_directory(config: EnvServerConfig, directory: str) -> Path:
    if config.root is None:
        raise PathOutsideWorkspace(
            "this server accepts no directory sources (start it with --root DIR), "
            "or upload the workspace as a tarball instead"
        )
    root = config.root.resolve()
    target = (root / directory).resolve()
    if not target.is_relative_to(root):
        raise PathOutsideWorkspace(f"directory {directory!r} is outside the server's root {root}")
    if not target.is_dir():
        raise DirectoryNotFound(f"no directory {directory!r} under the server's root {root}")
    return target


def _env_store(config: EnvServerConfig):  # type: ignore[no-untyped-def]
    from inhabit.envs.store import EnvStore  # the store (and uv) only where environments are used

    return EnvStore(config.env_store)


def _env_path(config: EnvServerConfig, env_id: str | None) -> Path | None:
    """The built environment `env_id` in this server's store (None for none); 404 when missing."""
    if env_id is None:
        return None
    path = _env_store(config).get(env_id)
    if path is None:
        raise EnvironmentNotFound(f"this server has no environment {env_id}: POST it to /environments first")
    return path


def _wheelhouses(config: EnvServerConfig) -> Path:
    from inhabit.envs.lock import cache_dir

    return config.wheelhouses or cache_dir() / "wheelhouses"


class EnvironmentNotFound(SandboxNotFound):
    """A create named an environment the server's store does not hold."""


def _client(request: Request) -> str | None:
    return (request.headers.get(CLIENT_HEADER) or "")[:64] or None


def add_routes(
    app: FastAPI, registry_of: Callable[[], SandboxRegistry], config: EnvServerConfig, lifecycle: Lifecycle
) -> None:
    """Attach every /v1 route to `app`; `registry_of()` returns the live registry."""
    r = APIRouter(prefix=API_PREFIX)
    # Bounds the spool space (and CPU) that uploads in flight can take at once.
    upload_slots = asyncio.Semaphore(config.max_concurrent_uploads)

    @r.get("/health")
    async def health() -> HealthOut:
        return HealthOut(
            backend=config.backend,
            sandboxes=len(registry_of().entries),
            max_upload_bytes=int(config.max_upload_mb * _MB),
            max_file_bytes=int(config.max_file_mb * _MB),
            idle_ttl_s=config.idle_ttl_s,
            lease_s=config.lease_s,
        )

    @r.post("/clients/{client_id}/heartbeat", status_code=204)
    async def heartbeat(client_id: str) -> Response:
        registry_of().heard_from(client_id[:64])
        return Response(status_code=204)

    @r.get("/sandboxes")
    async def list_sandboxes() -> list[SandboxOut]:
        reg = registry_of()
        return [_out(reg, sid) for sid in list(reg.entries)]

    @r.post("/environments")
    async def environment(req: EnvironmentIn) -> EnvironmentOut:
        """Build (or find) a task environment from its lock in this server's store: a remote
        sandbox mounts it as a local one does. From the wheelhouse the request names (uploaded
        to /wheelhouses), else the registry or the server's $INHABIT_WHEELHOUSE; wheels only
        unless the operator started the server with --allow-build."""
        from inhabit.envs.task_env import wheelhouse_from_env

        wheels = (
            wheelhouse_path(_wheelhouses(config), req.wheelhouse) if req.wheelhouse else wheelhouse_from_env()
        )

        def build():  # type: ignore[no-untyped-def]
            with tempfile.TemporaryDirectory(prefix="env-lock-", dir=registry_of().spool) as tmp:
                lock = Path(tmp) / "requirements.lock"
                lock.write_text(req.lock)
                return _env_store(config).ensure(
                    req.id, lock, req.python, wheelhouse=wheels, allow_build=config.allow_build
                )

        built = await asyncio.to_thread(build)
        return EnvironmentOut(id=built.env_id, reused=built.reused, install_s=round(built.install_s, 3))

    @r.post("/wheelhouses", status_code=201)
    async def wheelhouse(request: Request) -> WheelhouseOut:
        """Store the wheels of a tar body (content-addressed; see server_wheels) for environments."""
        cap = int(config.max_wheelhouse_mb * _MB)
        async with upload_slots:
            workdir = Path(tempfile.mkdtemp(prefix="wheels-", dir=registry_of().spool))
            try:
                archive = workdir / "wheels.tar"
                with archive.open("wb") as f:  # the guard middleware caps the body while it streams
                    async for chunk in request.stream():
                        f.write(chunk)
                wid, names = await asyncio.to_thread(
                    store_wheelhouse,
                    archive,
                    _wheelhouses(config),
                    max_bytes=cap,
                    max_files=config.max_upload_files,
                )
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
        return WheelhouseOut(id=wid, wheels=names)

    @r.post("/sandboxes", status_code=201)
    async def create(req: CreateRequest, request: Request) -> SandboxOut:
        reg = registry_of()
        if req.snapshot_id is not None:
            source: str | Path = reg.backend_snapshot(req.snapshot_id)
        else:
            assert req.directory is not None  # the model's validator guarantees one of them
            source = _resolve_directory(config, req.directory)
        env = _env_path(config, req.environment)
        sid = await reg.create(source, req.limits, upload_dir=None, client=_client(request), env=env)
        return _out(reg, sid)

    @r.post("/sandboxes/upload", status_code=201)
    async def create_from_upload(
        request: Request, limits: str | None = Query(None), environment: str | None = Query(None)
    ) -> SandboxOut:
        reg = registry_of()
        parsed = parse_limits(limits)
        env = _env_path(config, environment)
        async with upload_slots:
            return await _receive_upload(request, reg, parsed, env)

    async def _receive_upload(
        request: Request, reg: SandboxRegistry, parsed: SandboxLimits | None, env: Path | None = None
    ) -> SandboxOut:
        workdir = Path(tempfile.mkdtemp(prefix="upload-", dir=reg.spool))
        try:
            archive = workdir / "upload.tar"
            with archive.open("wb") as f:  # the guard middleware caps the body while it streams
                async for chunk in request.stream():
                    f.write(chunk)
            tree = workdir / "workspace"
            tree.mkdir()
            await asyncio.to_thread(
                unpack_tarball,
                archive,
                tree,
                max_bytes=int(config.max_extracted_mb * _MB),
                max_files=config.max_upload_files,
            )
            archive.unlink()
            sid = await reg.create(tree, parsed, upload_dir=workdir, client=_client(request), env=env)
        except BaseException:
            shutil.rmtree(workdir, ignore_errors=True)
            raise
        return _out(reg, sid)

    @r.get("/sandboxes/{sandbox_id}")
    async def info(sandbox_id: str) -> SandboxOut:
        return _out(registry_of(), sandbox_id)

    @r.delete("/sandboxes/{sandbox_id}", status_code=204)
    async def close(sandbox_id: str) -> Response:
        await registry_of().close(sandbox_id)
        return Response(status_code=204)

    @r.post(
        "/sandboxes/{sandbox_id}/exec", response_model=ExecResult, response_model_exclude=EXEC_OUT_EXCLUDE
    )
    async def exec_(sandbox_id: str, req: ExecRequest, request: Request) -> ExecResult:
        check_workspace_path(req.cwd)
        stdin = None
        if req.stdin_b64 is not None:
            try:
                stdin = base64.b64decode(req.stdin_b64, validate=True)
            except binascii.Error as e:
                raise ValueError(f"stdin_b64 is not valid base64: {e}") from e
        async with registry_of().use(sandbox_id) as entry:
            # A command whose client left (or a server stopping) is killed, not run to its end.
            res = await lifecycle.guard(
                request,
                entry.sandbox.exec(
                    req.command, timeout_s=req.timeout_s, env=req.env, cwd=req.cwd, stdin=stdin
                ),
            )
        return res

    @r.get("/sandboxes/{sandbox_id}/files")
    async def read_file(sandbox_id: str, path: str = Query(...)) -> Response:
        check_workspace_path(path)
        async with registry_of().use(sandbox_id) as entry:
            data = await entry.sandbox.read_file(path)
        return Response(content=data, media_type="application/octet-stream")

    @r.put("/sandboxes/{sandbox_id}/files", status_code=204)
    async def write_file(request: Request, sandbox_id: str, path: str = Query(...)) -> Response:
        check_workspace_path(path)
        registry_of().get(sandbox_id)  # 404 before reading a body for nothing
        cap = int(config.max_file_mb * _MB)
        data = bytearray()
        async for chunk in request.stream():
            data += chunk
            if len(data) > cap:
                raise SandboxLimitExceeded(f"file body exceeds this server's cap of {cap} bytes")
        async with registry_of().use(sandbox_id) as entry:
            await entry.sandbox.write_file(path, bytes(data))
        return Response(status_code=204)

    @r.delete("/sandboxes/{sandbox_id}/files", status_code=204)
    async def delete_file(sandbox_id: str, path: str = Query(...)) -> Response:
        check_workspace_path(path)
        async with registry_of().use(sandbox_id) as entry:
            await entry.sandbox.delete_file(path)
        return Response(status_code=204)

    @r.get("/sandboxes/{sandbox_id}/list")
    async def list_files(
        sandbox_id: str, path: str = Query("."), recursive: bool = Query(True)
    ) -> list[FileEntryOut]:
        check_workspace_path(path)
        async with registry_of().use(sandbox_id) as entry:
            entries = await entry.sandbox.list_files(path, recursive=recursive)
        return [FileEntryOut(path=e.path, kind=e.kind, size=e.size) for e in entries]

    @r.post("/sandboxes/{sandbox_id}/snapshot")
    async def snapshot(sandbox_id: str) -> SnapshotOut:
        import secrets

        reg = registry_of()
        async with reg.use(sandbox_id) as entry:
            backend_id = await entry.sandbox.snapshot()
            entry.snapshotted = True
        snap_id = "snap_" + secrets.token_hex(8)
        reg.snapshots[snap_id] = backend_id
        return SnapshotOut(snapshot_id=snap_id)

    @r.post("/sandboxes/{sandbox_id}/restore", status_code=204)
    async def restore(sandbox_id: str, req: RestoreRequest) -> Response:
        reg = registry_of()
        backend_id = reg.backend_snapshot(req.snapshot_id)
        async with reg.use(sandbox_id) as entry:
            await entry.sandbox.restore(backend_id)
        return Response(status_code=204)

    app.include_router(r)
