"""The env server's registry: live sandboxes, issued snapshot ids, idle reaping.

Sandbox and snapshot ids handed to clients are the server's own random ids (`sb_...`,
`snap_...`), mapped to the backend's, so a client can only name what this server issued (never,
say, a host path posing as a snapshot). Each request marks its sandbox busy while it runs. The
reaper closes a sandbox that runs no request when its client (the `X-Inhabit-Client` id it was
created with) has not been heard from for `lease_s`, or, for a sandbox created without a client
id, when no request used it for `idle_ttl_s`.

What this does NOT protect against: one client closing or using another client's sandboxes
(all holders of the token are equally trusted); snapshots are kept until shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from inhabit.errors import SandboxError, SandboxLimitExceeded, SandboxNotFound
from inhabit.log import get_logger
from inhabit.sandbox.base import Sandbox, SandboxLimits, SandboxProvider, create_sandbox

if TYPE_CHECKING:
    from inhabit.sandbox.server import EnvServerConfig

log = get_logger(__name__)


class TooManySandboxes(SandboxLimitExceeded):
    """The server holds `max_sandboxes` live sandboxes already."""


class UnknownSnapshot(SandboxNotFound):
    """The snapshot id was not issued by this server (or the server restarted)."""


class DirectoryNotFound(SandboxError):
    """A directory source does not exist under the server's root."""


@dataclass
class _Entry:
    sandbox: Sandbox
    last_used: float
    active: int = 0
    upload_dir: Path | None = None
    snapshotted: bool = False
    client: str | None = None  # the creating client's id: its lease keeps the sandbox


class SandboxRegistry:
    """Live sandboxes and issued snapshots of one server, with idle reaping."""

    def __init__(self, provider: SandboxProvider, config: EnvServerConfig, spool: Path) -> None:
        self.provider = provider
        self.config = config
        self.spool = spool
        self.entries: dict[str, _Entry] = {}
        self.snapshots: dict[str, str] = {}  # server snapshot id -> backend snapshot id
        self._reserved = 0  # creations in flight, counted against max_sandboxes
        self.clients: dict[str, float] = {}  # client id -> when it was last heard from

    def heard_from(self, client: str) -> None:
        """Renew `client`'s lease (any request it sends, heartbeats included)."""
        self.clients[client] = time.monotonic()

    def get(self, sandbox_id: str) -> _Entry:
        entry = self.entries.get(sandbox_id)
        if entry is None:
            raise SandboxNotFound(
                f"no live sandbox {sandbox_id!r} (closed, reaped after idling, or never made)"
            )
        return entry

    @contextlib.asynccontextmanager
    async def use(self, sandbox_id: str) -> AsyncIterator[_Entry]:
        entry = self.get(sandbox_id)
        entry.active += 1
        entry.last_used = time.monotonic()
        try:
            yield entry
        finally:
            entry.active -= 1
            entry.last_used = time.monotonic()

    def backend_snapshot(self, snapshot_id: str) -> str:
        try:
            return self.snapshots[snapshot_id]
        except KeyError:
            raise UnknownSnapshot(
                f"unknown snapshot {snapshot_id!r}: use an id this server's snapshot route returned"
            ) from None

    async def create(
        self,
        source: str | Path,
        limits: SandboxLimits | None,
        upload_dir: Path | None,
        client: str | None = None,
        env: Path | None = None,
    ) -> str:
        if len(self.entries) + self._reserved >= self.config.max_sandboxes:
            raise TooManySandboxes(
                f"this server already holds {self.config.max_sandboxes} sandboxes; close some first"
            )
        self._reserved += 1
        try:
            sandbox = await create_sandbox(self.provider, source, limits=limits, env=env)
        finally:
            self._reserved -= 1
        sandbox_id = "sb_" + secrets.token_hex(8)
        self.entries[sandbox_id] = _Entry(sandbox, time.monotonic(), upload_dir=upload_dir, client=client)
        if client is not None:
            self.heard_from(client)
        log.debug("env-server: created %s (%s)", sandbox_id, sandbox.sandbox_id)
        return sandbox_id

    async def close(self, sandbox_id: str) -> None:
        entry = self.entries.pop(sandbox_id, None)
        if entry is None:
            raise SandboxNotFound(f"no live sandbox {sandbox_id!r}")
        try:
            await entry.sandbox.close()
        finally:
            # A snapshot may still layer over the uploaded tree, so keep it until shutdown then.
            if entry.upload_dir is not None and not entry.snapshotted:
                shutil.rmtree(entry.upload_dir, ignore_errors=True)

    def _expired(self, e: _Entry, now: float) -> str | None:
        if e.active:
            return None
        if e.client is None:
            return "idle" if now - e.last_used > self.config.idle_ttl_s else None
        silent = now - max(self.clients.get(e.client, 0.0), e.last_used)
        return "its client went silent" if silent > self.config.lease_s else None

    async def reap(self) -> list[str]:
        """Close sandboxes whose lease or idle time ran out (see module docstring); return their ids."""
        now = time.monotonic()
        candidates = [sid for sid, e in self.entries.items() if self._expired(e, now)]
        reaped = []
        for sid in candidates:
            # Each close awaits: a client heard from (or a request begun) meanwhile keeps the rest.
            entry = self.entries.get(sid)
            why = self._expired(entry, time.monotonic()) if entry is not None else None
            if why is None:
                continue
            log.info("env-server: reaping %s (%s)", sid, why)
            reaped.append(sid)
            with contextlib.suppress(Exception):
                await self.close(sid)
        live = {e.client for e in self.entries.values()}
        for client in [c for c in self.clients if c not in live]:
            del self.clients[client]  # forget clients with no sandboxes left
        return reaped

    async def close_all(self) -> None:
        ids = list(self.entries)
        results = await asyncio.gather(*(self.close(sid) for sid in ids), return_exceptions=True)
        for sid, r in zip(ids, results, strict=True):
            if isinstance(r, BaseException):
                log.warning("env-server: closing %s at shutdown failed: %s", sid, r)
