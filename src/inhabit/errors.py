"""Typed errors: one base per boundary between parts.

Every user mistake raises exactly one of these, with a message that says what to do. Parts may
define narrower subclasses in their own modules, but always under the boundary's base here, so a
caller can catch "anything the sandbox refused" without knowing the sandbox's internals.
`assert` is for invariants only, never for validating input.
"""

from __future__ import annotations


class InhabitError(Exception):
    """Base of every error inhabit raises on purpose."""

    exit_code: int = 2
    """What `inhabit` exits with when this ends a command: 2 for bad input, 1 for work that failed."""


class ConfigError(InhabitError):
    """A config file or override is malformed or fails validation."""


class SandboxError(InhabitError):
    """A sandbox could not be created, used or cleaned up."""


class SandboxNotFound(SandboxError):
    """The sandbox id (or snapshot id) is unknown, e.g. already closed."""


class PathOutsideWorkspace(SandboxError):
    """A path given to a sandbox file operation escapes the workspace."""


class SandboxLimitExceeded(SandboxError):
    """An upload or request exceeded a configured size limit."""


class HarnessError(InhabitError):
    """The agent loop was misused (bad policy output never raises this: it becomes an observation)."""


class TaskFormatError(InhabitError):
    """A task directory or task file does not follow the task format (docs/architecture.md)."""


class GradingError(InhabitError):
    """Grading could not be carried out (not: the agent's code failed tests)."""


class InferenceError(InhabitError):
    """The inference engine or a remote endpoint failed or refused a request."""


class PolicyUnreachable(InferenceError):
    """The policy's endpoint cannot be used at all: nothing listens, the model name is unknown, or
    the key is refused. An error of the command (`inhabit agent`, `inhabit eval`), never one
    rollout's outcome: the harness loop lets it through instead of recording a `policy_error`."""

    exit_code = 1


class ModelLoadError(InferenceError):
    """A model folder is missing, incomplete or of an unsupported architecture."""


class WeightsError(InhabitError):
    """Weight publication, transfer or decoding failed."""


class ChecksumMismatch(WeightsError):
    """Data did not match its recorded checksum (corruption in storage or transit)."""


class TrainerError(InhabitError):
    """The trainer was given inconsistent data or state."""


class OrchestratorError(InhabitError):
    """The pipeline could not be wired or run as configured."""


class RolloutsFailing(OrchestratorError):
    """Every rollout of a long streak failed the same way (an engine that answers nothing but errors,
    a sandbox that cannot start): the run stops and says why instead of generating forever."""

    exit_code = 1


class OnlineError(InhabitError):
    """The session store or the online loop was misused (an unknown session, a store not set up)."""


class EnvError(InhabitError):
    """A task's test environment cannot be resolved, locked, built or found (`inhabit.envs`)."""


class EnvBuildError(EnvError):
    """Installing an environment failed (a package's hash, a broken wheel): the work failed, not the input."""

    exit_code = 1
