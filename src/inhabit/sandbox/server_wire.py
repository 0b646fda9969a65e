"""Wire types of the environment server (`inhabit sandbox env-server`), shared by server and client.

Every route lives under `/v1` and needs `Authorization: Bearer <token>`. JSON bodies are these
pydantic models; file contents travel as raw bytes (`application/octet-stream` bodies for
PUT/GET of `/v1/sandboxes/{id}/files?path=...`), exec's optional stdin as base64 in JSON, and a
workspace upload and a wheelhouse upload as a raw tar (optionally gzip-compressed) body. Errors are JSON
`{"detail": "<what went wrong and what to do>", "code": "<one of ERROR_CODES>"}`.

This module protects nothing; it only fixes the shapes that cross the wire.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inhabit.envs.lock import ENV_ID_PATTERN as _ENV_ID
from inhabit.sandbox.base import MAX_TIMEOUT_S, SandboxLimits

API_PREFIX = "/v1"
# A client's own random id: its sandboxes live while it is heard from (see server.py, leases).
CLIENT_HEADER = "x-inhabit-client"

# error code -> HTTP status; the client maps codes (not only statuses) back to typed errors.
ERROR_CODES: dict[str, int] = {
    "unauthorized": 401,
    "bad_request": 400,
    "path_outside_workspace": 400,
    "sandbox_error": 400,
    "environment_error": 400,
    "is_a_directory": 400,
    "not_a_directory": 400,
    "permission_denied": 403,
    "sandbox_not_found": 404,
    "snapshot_not_found": 404,
    "file_not_found": 404,
    "directory_not_found": 404,
    "payload_too_large": 413,
    "validation": 422,
    "too_many_sandboxes": 429,
    "client_closed": 499,
    "internal": 500,
    "shutting_down": 503,
}


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid")


class EnvironmentIn(_Wire):
    """A task environment for the server to build (or find) in its own store, from its lock."""

    id: str = Field(pattern=_ENV_ID, description="The environment id: digest of python + lock.")
    python: str = Field(pattern=r"^3\.\d{1,2}$", description="Python version the lock was made for.")
    lock: str = Field(max_length=4_000_000, description="The lock file's text (pins with hashes).")
    wheelhouse: str | None = Field(
        None, pattern=_ENV_ID, description="Install from this uploaded wheelhouse (POST /wheelhouses) only."
    )


class WheelhouseOut(_Wire):
    """An uploaded wheelhouse: its content address (name it in EnvironmentIn) and its wheels."""

    id: str
    wheels: list[str]


class EnvironmentOut(_Wire):
    id: str
    reused: bool
    install_s: float


class CreateRequest(_Wire):
    """Create a sandbox from exactly one of: a directory under the server's root, or a snapshot."""

    directory: str | None = Field(None, description="Path relative to the server's --root.")
    snapshot_id: str | None = Field(None, description="An id returned by this server's snapshot route.")
    limits: SandboxLimits | None = None
    environment: str | None = Field(
        None, pattern=_ENV_ID, description="A task environment this server has (POST /environments first)."
    )

    @model_validator(mode="after")
    def _exactly_one_source(self) -> CreateRequest:
        if (self.directory is None) == (self.snapshot_id is None):
            raise ValueError("give exactly one of 'directory' or 'snapshot_id'")
        return self


class SandboxOut(_Wire):
    sandbox_id: str
    backend: str
    isolated: bool
    limits: SandboxLimits
    idle_s: float = 0.0
    active_requests: int = 0
    lease_s: float | None = Field(None, description="Heartbeat within this, or the sandbox is reaped.")


class ExecRequest(_Wire):
    command: str | list[str] = Field(..., description="A shell string (sh -c) or an argv list.")
    timeout_s: float | None = Field(None, gt=0, le=MAX_TIMEOUT_S)
    env: dict[str, str] | None = None
    cwd: str = "."
    stdin_b64: str | None = Field(None, description="Bytes fed to the command's stdin, base64.")

    @model_validator(mode="after")
    def _non_empty(self) -> ExecRequest:
        if not self.command:
            raise ValueError("command must be a non-empty string or argv list")
        # The kernel ends a C string at NUL: what ran would not be what was asked.
        argv = [self.command] if isinstance(self.command, str) else self.command
        if any("\x00" in a for a in [*argv, self.cwd]):
            raise ValueError("command and cwd must not contain a NUL byte")
        for key, value in (self.env or {}).items():
            if not key or "=" in key or "\x00" in key:
                raise ValueError(f"env key {key!r} must be non-empty, without '=' or NUL")
            if "\x00" in value:
                raise ValueError(f"env value of {key!r} must not contain a NUL byte")
        return self


# exec answers with `inhabit.sandbox.base.ExecResult` itself, less `output_order` (EXEC_OUT_EXCLUDE).
EXEC_OUT_EXCLUDE = {"output_order"}


class FileEntryOut(_Wire):
    path: str
    kind: Literal["file", "dir", "symlink"]
    size: int = 0


class SnapshotOut(_Wire):
    snapshot_id: str


class RestoreRequest(_Wire):
    snapshot_id: str


class HealthOut(_Wire):
    status: Literal["ok"] = "ok"
    backend: str
    sandboxes: int
    max_upload_bytes: int
    max_file_bytes: int
    idle_ttl_s: float
    lease_s: float | None = None


class ErrorOut(_Wire):
    detail: str
    code: str
