"""Sandboxes that live on an environment server (`inhabit sandbox env-server`), used through HTTP.

`RemoteSandboxProvider(url, token)` is a `SandboxProvider` like any local backend, so a pool,
the harness or the grader use remote sandboxes without knowing it:

    provider = RemoteSandboxProvider("http://10.0.0.5:8765", token)
    async with await provider.create("task/workspace") as sb:   # local dir: uploaded as tar.gz
        print((await sb.exec("pytest -q")).stdout)

`create(source)` reads `source` as: `"server:<dir>"` (a directory under the server's `--root`),
a local directory (any `Path`, or a string with a '/': packed and uploaded, bounded by the
server's upload cap, which is checked before sending), or else a snapshot id this server returned.
`create(source, env=BUILT_ENV)` sends the environment's id and lock (never its files) to
`POST /environments` once; the server builds or finds it in its own store and mounts it. With a
`wheelhouse` (a folder of wheels; `sandbox.remote_wheelhouse`), its .whl files are uploaded once
(`POST /wheelhouses`) before the first environment, and the server installs from them only, as a
local `--wheelhouse` build does: for a server without a registry. Every call has a timeout
(exec's is its own `timeout_s` plus a margin); HTTP errors come back as the typed errors of
`inhabit.errors` and the OS errors a local sandbox raises (404 -> SandboxNotFound or
FileNotFoundError, 400 -> PathOutsideWorkspace, IsADirectoryError or
SandboxError, 413/429 -> SandboxLimitExceeded, 401 -> EnvServerUnauthorized, a server that
cannot be reached or answers 503 `shutting_down` -> EnvServerLost); only idempotent calls (reads,
listing, writes, deletes, restore, close) are retried, and only on connection errors, never a
create, exec or snapshot, which could otherwise happen twice. `losses` counts the EnvServerLost
errors this provider met, so placement can tell a rollout that lost its server from one that failed.

The provider names itself to the server (a random client id) and, while it holds sandboxes, sends
a heartbeat every third of the server's lease: a client killed outright loses its sandboxes
after the lease (30 s by default), one that is alive keeps them. A sandbox not closed by the time
the interpreter exits is closed by a last synchronous request.
What this does NOT protect against: isolation is the server's backend's; the token travels in
clear over plain HTTP.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import io
import json
import os
import secrets
import tarfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
from pydantic import TypeAdapter

from inhabit.errors import (
    ConfigError,
    PathOutsideWorkspace,
    SandboxError,
    SandboxLimitExceeded,
    SandboxNotFound,
)
from inhabit.log import get_logger
from inhabit.sandbox import cleanup
from inhabit.sandbox.base import (
    ExecCall,
    ExecResult,
    FileEntry,
    Sandbox,
    SandboxInfo,
    SandboxLimits,
    SandboxProvider,
)
from inhabit.sandbox.server_wire import API_PREFIX, CLIENT_HEADER, HealthOut, SandboxOut

log = get_logger(__name__)

_EXEC_RESULT = TypeAdapter(ExecResult)  # exec answers with an ExecResult (less output_order: server_wire)

SERVER_DIR_PREFIX = "server:"
TOKEN_ENV = "INHABIT_ENV_TOKEN"
# Connection-level failures: the request may not have reached the server (or its answer was lost).
_RETRYABLE = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
)


_OS_ERRORS: dict[str, type[OSError]] = {
    "file_not_found": FileNotFoundError,
    "is_a_directory": IsADirectoryError,
    "not_a_directory": NotADirectoryError,
    "permission_denied": PermissionError,
}


class EnvServerUnauthorized(SandboxError):
    """The env server refused the bearer token (401)."""


class EnvServerLost(SandboxError):
    """The env server cannot be reached or is shutting down: run the work on another server."""


def error_from_response(resp: httpx.Response) -> Exception:
    """Map an env-server error response to the typed error a local backend would raise."""
    try:
        body = resp.json()
        detail, code = str(body.get("detail")), body.get("code")
    except (ValueError, AttributeError):
        detail, code = resp.text[:500], None
    status = resp.status_code
    if status == 503 and code == "shutting_down":
        return EnvServerLost(f"the env server is shutting down: {detail}")
    if status == 401:
        return EnvServerUnauthorized(
            f"the env server refused the token: {detail}; check --token / INHABIT_ENV_TOKEN"
        )
    if code == "path_outside_workspace":
        return PathOutsideWorkspace(detail)
    if code in _OS_ERRORS:
        return _OS_ERRORS[code](detail)
    if status == 404 and code in ("sandbox_not_found", "snapshot_not_found"):
        return SandboxNotFound(detail)
    if status in (413, 429):
        return SandboxLimitExceeded(detail)
    return SandboxError(f"env server answered {status} ({code}): {detail}")


class _Http:
    """One httpx client with the token, timeouts, retries and error mapping."""

    def __init__(self, url: str, token: str, *, timeout_s: float, retries: int) -> None:
        self.url = url.rstrip("/")
        self.retries = max(1, retries)
        self.client_id = secrets.token_hex(8)
        self.headers = {"Authorization": f"Bearer {token}", CLIENT_HEADER: self.client_id}
        self.losses = 0
        self.client = httpx.AsyncClient(
            base_url=self.url + API_PREFIX,
            headers=self.headers,
            timeout=httpx.Timeout(timeout_s),
            # No cap on connections: a rollout may hold hundreds of long execs at once, and a
            # capped pool would make every other call wait behind them until it timed out.
            # Idle connections are dropped well before the server's keep-alive timeout (30 s in
            # env-server), so a request never goes out on a connection the server is closing.
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64, keepalive_expiry=2.0),
        )

    def delete_now(self, path: str) -> None:
        """Synchronous best-effort DELETE, for interpreter exit (no event loop may be left)."""
        with contextlib.suppress(Exception):
            httpx.delete(self.url + API_PREFIX + path, headers=self.headers, timeout=1.0)

    async def request(
        self, method: str, path: str, *, idempotent: bool, timeout_s: float | None = None, **kw: Any
    ) -> httpx.Response:
        try:
            return await self._request(method, path, idempotent=idempotent, timeout_s=timeout_s, **kw)
        except EnvServerLost:
            self.losses += 1
            raise

    async def _request(
        self, method: str, path: str, *, idempotent: bool, timeout_s: float | None = None, **kw: Any
    ) -> httpx.Response:
        attempts = self.retries if idempotent else 1
        timeout = httpx.Timeout(timeout_s) if timeout_s is not None else httpx.USE_CLIENT_DEFAULT
        for attempt in range(attempts):
            try:
                resp = await self.client.request(method, path, timeout=timeout, **kw)
            except _RETRYABLE as e:
                if attempt + 1 >= attempts:
                    raise EnvServerLost(f"cannot reach the env server at {self.url}: {e!r}") from e
                await asyncio.sleep(0.1 * 3**attempt)
                continue
            except httpx.TimeoutException as e:
                raise SandboxError(
                    f"the env server at {self.url} did not answer {method} {path} in time"
                ) from e
            if resp.status_code >= 400:
                raise error_from_response(resp)
            return resp
        raise AssertionError("unreachable: the loop returns or raises")

    async def aclose(self) -> None:
        await self.client.aclose()


class _Order:
    """Keeps a sandbox's calls in the order the program issued them, as a local backend does.

    Concurrent HTTP requests may reach the server in any order, so without this a snapshot could
    miss a write that was started before it. File ops and execs run concurrently; a snapshot
    waits for every one started before it, a restore for the file ops (the server's restore
    kills running commands, as a local one does); both hold later calls back until they are done.
    """

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._running = {"file": 0, "exec": 0}
        self._idle = {"file": asyncio.Event(), "exec": asyncio.Event()}
        for event in self._idle.values():
            event.set()

    @contextlib.asynccontextmanager
    async def op(self, kind: str) -> AsyncIterator[None]:
        async with self._lock:  # queue behind a snapshot/restore that was issued earlier
            self._running[kind] += 1
            self._idle[kind].clear()
        try:
            yield
        finally:
            self._running[kind] -= 1
            if self._running[kind] == 0:
                self._idle[kind].set()

    @contextlib.asynccontextmanager
    async def alone(self, *waits_for: str) -> AsyncIterator[None]:
        async with self._lock:
            for kind in waits_for:
                await self._idle[kind].wait()
            yield


class RemoteSandbox(Sandbox):
    """A sandbox on an env server; every method is one HTTP request."""

    def __init__(
        self, http: _Http, out: SandboxOut, *, exec_margin_s: float, owner: RemoteSandboxProvider
    ) -> None:
        self._http = http
        self.sandbox_id = out.sandbox_id
        self._info = SandboxInfo(
            sandbox_id=out.sandbox_id,
            backend=out.backend,  # the server's backend: what isolates this sandbox
            isolated=out.isolated,
            limits=out.limits,
        )
        self.url = http.url
        self._exec_margin_s = exec_margin_s
        self._owner = owner
        self._closed = False
        self._order = _Order()
        # A program that exits without closing still tells the server (else: the idle TTL).
        self._cleanup_handle = cleanup.register(functools.partial(http.delete_now, self._p()))

    @property
    def info(self) -> SandboxInfo:
        return self._info

    def _p(self, suffix: str = "") -> str:
        return f"/sandboxes/{self.sandbox_id}{suffix}"

    async def run_exec(self, call: ExecCall) -> ExecResult:
        # The server checks the command and applies the limits; the wait here is the server's
        # limit plus a margin (a timeout_s the server refuses, 0 or less, fails before either).
        effective = call.timeout(self._info.limits)
        body: dict[str, Any] = {
            "command": call.command,
            "timeout_s": call.timeout_s,
            "env": dict(call.env) if call.env is not None else None,
            "cwd": call.cwd,
            "stdin_b64": base64.b64encode(call.stdin).decode() if call.stdin is not None else None,
        }
        async with self._order.op("exec"):
            resp = await self._http.request(
                "POST",
                self._p("/exec"),
                idempotent=False,
                json=body,
                timeout_s=effective + self._exec_margin_s,
            )
        return _EXEC_RESULT.validate_python(resp.json())

    async def read_file(self, path: str) -> bytes:
        async with self._order.op("file"):
            resp = await self._http.request("GET", self._p("/files"), idempotent=True, params={"path": path})
        return resp.content

    async def write_file(self, path: str, data: bytes | str) -> None:
        content = data.encode() if isinstance(data, str) else bytes(data)
        async with self._order.op("file"):
            await self._http.request(
                "PUT",
                self._p("/files"),
                idempotent=True,
                params={"path": path},
                content=content,
                headers={"Content-Type": "application/octet-stream"},
            )

    async def delete_file(self, path: str) -> None:
        async with self._order.op("file"):
            await self._http.request("DELETE", self._p("/files"), idempotent=True, params={"path": path})

    async def list_files(self, path: str = ".", *, recursive: bool = True) -> list[FileEntry]:
        async with self._order.op("file"):
            resp = await self._http.request(
                "GET",
                self._p("/list"),
                idempotent=True,
                params={"path": path, "recursive": str(recursive).lower()},
            )
        return [FileEntry(path=e["path"], kind=e["kind"], size=e.get("size", 0)) for e in resp.json()]

    async def snapshot(self) -> str:
        async with self._order.alone("file", "exec"):
            resp = await self._http.request("POST", self._p("/snapshot"), idempotent=False)
        return str(resp.json()["snapshot_id"])

    async def restore(self, snapshot_id: str) -> None:
        limits = self._info.limits
        async with self._order.alone("file"):
            await self._http.request(
                "POST",
                self._p("/restore"),
                idempotent=True,
                json={"snapshot_id": snapshot_id},
                timeout_s=limits.default_timeout_s + self._exec_margin_s,
            )

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        cleanup.unregister(self._cleanup_handle)
        self._owner._forget(self)
        try:
            await self._http.request("DELETE", self._p(), idempotent=True)
        except SandboxNotFound:
            pass  # already gone (closed by a retried request, or reaped): that is what we wanted
        except SandboxError as e:
            # The server's idle reaper closes it eventually; a close must not fail a rollout.
            log.warning(
                "closing remote sandbox %s failed (%s); the server reaps it after its TTL", self.sandbox_id, e
            )


def pack_directory(directory: Path, max_bytes: int | None = None) -> bytes:
    """A gzip'd tar of `directory`'s contents (fast compression: uploads are CPU-bound on loopback)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        for child in sorted(directory.iterdir()):
            tar.add(child, arcname=child.name)
            if max_bytes is not None and buf.tell() > max_bytes:
                break  # already over: the caller refuses it, no need to pack the rest
    return buf.getvalue()


class RemoteSandboxProvider(SandboxProvider):
    """Creates sandboxes on an env server; see the module docstring for what `source` may be.

    One provider holds one pooled HTTP connection set: use it from one event loop (as with any
    asyncio client), and `close()` it when done.
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        limits: SandboxLimits | None = None,
        *,
        timeout_s: float = 60.0,
        exec_margin_s: float = 30.0,
        retries: int = 3,
        heartbeat: bool = True,
        wheelhouse: str | Path | None = None,
    ) -> None:
        """`heartbeat=False`: no lease renewals, so idle sandboxes last one lease (tests, scripts).
        `wheelhouse`: the wheels environments are built from on the server (module docstring)."""
        token = token or os.environ.get(TOKEN_ENV)
        if not token:
            raise ConfigError(f"the env server at {url} needs a token: pass token= or set {TOKEN_ENV}")
        self.url = url
        self.limits = limits
        self._http = _Http(url, token, timeout_s=timeout_s, retries=retries)
        self._exec_margin_s = exec_margin_s
        self._live: dict[str, RemoteSandbox] = {}
        self._envs: set[str] = set()  # environments the server confirmed it holds
        # Named explicitly, never taken from $INHABIT_WHEELHOUSE: a local build's wheelhouse may be
        # far larger than the server's cap, and a server with a registry needs none.
        self._wheelhouse = wheelhouse
        self._wheelhouse_id: str | None = None  # set once the server holds it
        self._health: HealthOut | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._lease_s: float | None = None
        self._beats = heartbeat

    @property
    def losses(self) -> int:
        """How many calls ended in EnvServerLost (unreachable, or shutting down) so far."""
        return self._http.losses

    async def health(self) -> HealthOut:
        """The server's status and size caps (also checks that the token is accepted)."""
        resp = await self._http.request("GET", "/health", idempotent=True)
        self._health = HealthOut.model_validate(resp.json())
        return self._health

    async def list_sandboxes(self) -> list[SandboxOut]:
        """Every live sandbox on the server (all clients')."""
        resp = await self._http.request("GET", "/sandboxes", idempotent=True)
        return [SandboxOut.model_validate(x) for x in resp.json()]

    async def create(
        self, source: str | Path, *, limits: SandboxLimits | None = None, env: str | Path | None = None
    ) -> RemoteSandbox:
        limits = limits or self.limits
        env_id = await self._environment(Path(env)) if env is not None else None
        text = str(source)
        if text.startswith(SERVER_DIR_PREFIX):
            return await self._create_json({"directory": text[len(SERVER_DIR_PREFIX) :]}, limits, env_id)
        if isinstance(source, Path) or Path(text).is_dir() or "/" in text:
            return await self._upload(Path(source), limits, env_id)  # a path (snapshot ids have no '/')
        return await self._create_json({"snapshot_id": text}, limits, env_id)

    async def _environment(self, env: Path) -> str:
        """Have the server build (or find) the environment `env` (a built one here: its id and lock
        travel, never its files); returns its id."""
        try:
            meta = json.loads((env / "inhabit-env.json").read_text())
            lock = (env / "requirements.lock").read_text()
        except (OSError, ValueError) as e:
            raise SandboxError(
                f"{env} is not a built task environment (inhabit-env.json, requirements.lock): {e}"
            ) from e
        env_id = str(meta["id"])
        if env_id not in self._envs:
            body = {"id": env_id, "python": meta["python"], "lock": lock}
            if self._wheelhouse is not None:
                if self._wheelhouse_id is None:
                    self._wheelhouse_id = await self.upload_wheelhouse(self._wheelhouse)
                body["wheelhouse"] = self._wheelhouse_id
            await self._http.request("POST", "/environments", idempotent=True, json=body)
            self._envs.add(env_id)
        return env_id

    async def upload_wheelhouse(self, folder: str | Path) -> str:
        """Upload the .whl files of `folder` to the server; returns the id it keeps them under
        (the same wheels always get the same id, and are stored once)."""
        folder = Path(folder)
        wheels = sorted(folder.glob("*.whl")) if folder.is_dir() else []
        if not wheels:
            raise SandboxError(f"wheelhouse {folder} holds no .whl file: give a folder of wheels")

        def pack() -> bytes:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as tar:  # wheels are zip files: no gzip
                for wheel in wheels:
                    tar.add(wheel, arcname=wheel.name)
            return buf.getvalue()

        data = await asyncio.to_thread(pack)
        resp = await self._http.request(
            "POST",
            "/wheelhouses",
            idempotent=True,  # content-addressed: a repeat stores nothing new
            content=data,
            headers={"Content-Type": "application/x-tar"},
        )
        return str(resp.json()["id"])

    async def _create_json(
        self, body: dict[str, Any], limits: SandboxLimits | None, env_id: str | None = None
    ) -> RemoteSandbox:
        body["limits"] = limits.model_dump() if limits is not None else None
        if env_id is not None:
            body["environment"] = env_id
        resp = await self._http.request("POST", "/sandboxes", idempotent=False, json=body)
        return self._adopt(resp)

    async def _upload(
        self, directory: Path, limits: SandboxLimits | None, env_id: str | None = None
    ) -> RemoteSandbox:
        if not directory.is_dir():
            raise SandboxError(
                f"{directory} is not a local directory; give a workspace directory, "
                "'server:<dir>' for one under the server's --root, or a snapshot id"
            )
        cap = (self._health or await self.health()).max_upload_bytes
        data = await asyncio.to_thread(pack_directory, directory, cap)
        if len(data) > cap:
            raise SandboxLimitExceeded(
                f"{directory} packs to more than the server's upload cap of {cap} bytes; "
                "put it under the server's --root and use 'server:<dir>', or raise --max-upload-mb"
            )
        params = {"limits": limits.model_dump_json()} if limits is not None else {}
        if env_id is not None:
            params["environment"] = env_id
        resp = await self._http.request(
            "POST",
            "/sandboxes/upload",
            idempotent=False,
            content=data,
            params=params,
            headers={"Content-Type": "application/gzip"},
        )
        return self._adopt(resp)

    def _adopt(self, resp: httpx.Response) -> RemoteSandbox:
        out = SandboxOut.model_validate(resp.json())
        sb = RemoteSandbox(self._http, out, exec_margin_s=self._exec_margin_s, owner=self)
        self._live[sb.sandbox_id] = sb
        if out.lease_s is not None and self._beats:
            self._lease_s = out.lease_s
            if self._heartbeat is None or self._heartbeat.done():
                self._heartbeat = asyncio.create_task(self._beat(), name="env-server-heartbeat")
        return sb

    async def _beat(self) -> None:
        """Renew this client's lease while it holds sandboxes (a failed beat is retried next time)."""
        while self._live and self._lease_s is not None:
            await asyncio.sleep(self._lease_s / 3)
            try:
                await self._http.client.post(
                    f"/clients/{self._http.client_id}/heartbeat", timeout=self._lease_s / 3
                )
            except httpx.HTTPError as e:
                log.debug("heartbeat to %s failed: %r", self.url, e)

    def _forget(self, sb: RemoteSandbox) -> None:
        self._live.pop(sb.sandbox_id, None)

    async def close(self) -> None:
        """Close every sandbox this provider created, then the connection pool.

        Snapshots stay on the server until it shuts down (it has no route to drop one).
        """
        await asyncio.gather(*(sb.close() for sb in list(self._live.values())), return_exceptions=True)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        await self._http.aclose()
