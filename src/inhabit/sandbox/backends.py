"""The sandbox backends, by name: the one place that lists them (`SANDBOX_BACKENDS`).

`sandbox.backend` in a run's config, the `--backend`/`--sandbox` options of the commands and
`create_provider` all read this registry. Each name maps to a function that builds the
backend's provider from a `SandboxConfig`; the backend's module is imported only when it is
built. A new backend is its module plus one `register` line here.

Protects nothing by itself: each backend's module says what it does and does not protect against.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from inhabit.errors import ConfigError
from inhabit.registry import Registry

if TYPE_CHECKING:
    from collections.abc import Callable

    from inhabit.sandbox import SandboxConfig
    from inhabit.sandbox.base import SandboxProvider

__all__ = ["SANDBOX_BACKENDS", "LocalSandboxBackendName", "SandboxBackendName"]

SANDBOX_BACKENDS: Registry[Callable[[SandboxConfig], SandboxProvider]] = Registry("sandbox backend")
SANDBOX_BACKENDS.register(
    "auto", "inhabit.sandbox.backends:auto_provider", "bwrap where it works, else process (with a warning)"
)
SANDBOX_BACKENDS.register(
    "bwrap",
    "inhabit.sandbox.backends:bwrap_provider",
    "namespaces, copy-on-write workspace, no network, resource limits (inhabit.sandbox.bwrap)",
)
SANDBOX_BACKENDS.register(
    "process",
    "inhabit.sandbox.backends:process_provider",
    "a plain subprocess in a temporary copy; isolates NOTHING (inhabit.sandbox.process)",
)
SANDBOX_BACKENDS.register(
    "remote",
    "inhabit.sandbox.backends:remote_provider",
    "sandboxes on an environment server over HTTP (inhabit.sandbox.remote)",
    local=False,
)

SandboxBackendName = SANDBOX_BACKENDS.name_type()
"""A config field holding any registered backend."""
LocalSandboxBackendName = SANDBOX_BACKENDS.name_type(local_only=True)
"""A config field holding a backend that runs on this machine (no server URL to give)."""


def bwrap_provider(config: SandboxConfig) -> SandboxProvider:
    from inhabit.sandbox.bwrap import BwrapSandboxProvider, bwrap_problem

    if (problem := bwrap_problem()) is not None:
        raise ConfigError(f"sandbox.backend='bwrap' does not work on this host: {problem}")
    return BwrapSandboxProvider(
        limits=config.limits,
        scratch_dir=config.scratch_dir,
        workspace_mode=config.workspace_mode,
        machine=config.machine,
        supervisor=config.supervisor,
        warm_tests=config.warm_tests,
    )


def process_provider(config: SandboxConfig) -> SandboxProvider:
    from inhabit.sandbox.process import ProcessSandboxProvider

    return ProcessSandboxProvider(
        limits=config.limits, scratch_dir=config.scratch_dir, machine=config.machine
    )


def auto_provider(config: SandboxConfig) -> SandboxProvider:
    from inhabit.sandbox.bwrap import bwrap_problem

    problem = bwrap_problem()  # cached: bwrap_provider does not probe again
    if problem is None:
        return bwrap_provider(config)
    from inhabit.log import get_logger

    get_logger(__name__).warning("bwrap sandbox unavailable (%s); falling back to 'process'", problem)
    return process_provider(config)


def remote_provider(config: SandboxConfig) -> SandboxProvider:
    if not config.remote_url:
        raise ConfigError("sandbox.backend='remote' needs sandbox.remote_url (e.g. http://host:8700)")
    from inhabit.sandbox.remote import RemoteSandboxProvider

    return RemoteSandboxProvider(
        url=config.remote_url,
        token=config.remote_token,
        limits=config.limits,
        wheelhouse=config.remote_wheelhouse,
    )
