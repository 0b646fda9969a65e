"""Errors the inference part raises, all under `inhabit.errors.InferenceError`.

Callers (the server, the orchestrator) catch these narrow classes to map them to HTTP statuses or
retry decisions; everything else that goes wrong inside a request becomes a `Completion` with
`finish_reason="error"`, never an exception that takes down its batch.
"""

from __future__ import annotations

from inhabit.errors import InferenceError


class EngineOverloaded(InferenceError):
    """The engine's bounded queue is full: retry later or raise `max_queue`."""


class EngineClosed(InferenceError):
    """The engine was closed (or its worker died) and takes no more requests."""


class InvalidRequest(InferenceError):
    """A request is malformed (empty prompt, prompt longer than the context, bad sampling value)."""


class WeightLoadError(InferenceError):
    """New weights do not fit the loaded model (unknown names or wrong shapes)."""


class ServeRefused(InferenceError):
    """`inhabit serve` will not start on this model folder with these settings (one line says why)."""


class RemoteEngineError(InferenceError):
    """A remote OpenAI-compatible server refused a request or could not be reached."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status
