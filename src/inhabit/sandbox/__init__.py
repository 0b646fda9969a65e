"""inhabit.sandbox: isolated workspaces the agent acts on (see docs/sandbox.md).

`create_provider(SandboxConfig(...))` builds the backend `sandbox.backend` names; the backends
are registered in `inhabit.sandbox.backends` (the one list of them): "auto" (the default: bwrap
where it works on this host, else process with a loud warning), "bwrap" (namespaces,
copy-on-write workspace, no network, resource limits; `inhabit.sandbox.bwrap` says exactly what
it does and does not protect), "process" (a plain subprocess in a temporary copy; isolates
NOTHING), "remote" (sandboxes on an environment server, `inhabit sandbox env-server`, over HTTP).

This module imports no backend eagerly, so `import inhabit.sandbox` stays cheap.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from inhabit.config import Config
from inhabit.sandbox.backends import SANDBOX_BACKENDS, SandboxBackendName
from inhabit.sandbox.base import (
    WORKSPACE_MOUNT,
    ExecResult,
    FileEntry,
    Sandbox,
    SandboxInfo,
    SandboxLimits,
    SandboxProvider,
)
from inhabit.sandbox.machine import MachineProfile

__all__ = [
    "SANDBOX_BACKENDS",
    "WORKSPACE_MOUNT",
    "ExecResult",
    "FileEntry",
    "MachineProfile",
    "Sandbox",
    "SandboxConfig",
    "SandboxInfo",
    "SandboxLimits",
    "SandboxProvider",
    "create_provider",
]


class SandboxConfig(Config):
    """Which sandbox backend to use and how to limit it (the `[sandbox]` table of a run)."""

    backend: SandboxBackendName = Field(
        "auto", description="auto = bwrap where it works, else process (which isolates nothing)."
    )
    limits: SandboxLimits = Field(default_factory=SandboxLimits, description="Per-sandbox resource limits.")
    machine: MachineProfile = Field(
        default_factory=MachineProfile,
        description="What the sandbox looks like from inside: host name, user, home, environment.",
    )
    scratch_dir: str | None = Field(
        None,
        description="Where workspaces, upper layers and snapshots live; default a tmpfs (/dev/shm) "
        "when present, since deleting trees on disk with online discard takes seconds.",
    )
    workspace_mode: Literal["auto", "overlay", "copy"] = Field(
        "auto",
        description="bwrap only: 'overlay' = kernel overlayfs copy-on-write (needs root), 'copy' = "
        "a plain copy of the source (works everywhere, slower create); auto = overlay when possible.",
    )
    supervisor: bool = Field(
        True,
        description="bwrap only: start bwrap once per sandbox, with a small supervisor inside that "
        "forks each exec (false: one bwrap per exec, the older and slower path).",
    )
    warm_tests: bool = Field(
        True,
        description="bwrap with the supervisor only: run pytest test commands (the run_tests tool, "
        "grading) in a warm worker that has pytest imported and forks one run per test run "
        "(false: a fresh interpreter per test run). Results are the same either way.",
    )
    remote_url: str | None = Field(None, description="Environment server URL for backend='remote'.")
    remote_token: str | None = Field(
        None, description="Bearer token for the environment server (else from its env variable)."
    )
    remote_wheelhouse: str | None = Field(
        None,
        description="A folder of wheels uploaded to the environment server once, which then builds "
        "task environments from those wheels only (for a server without a package registry).",
    )


def create_provider(config: SandboxConfig | None = None) -> SandboxProvider:
    """Build the provider `config` asks for (see `inhabit.sandbox.backends`)."""
    config = config or SandboxConfig()
    return SANDBOX_BACKENDS.load(config.backend)(config)
