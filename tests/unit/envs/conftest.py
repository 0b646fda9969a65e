"""Fixtures for environment tests: see tests/env_fixtures.py and tests/task_fixtures.py."""

from env_fixtures import _session_cache, dep_task, env_cache, wheelhouse
from task_fixtures import sandbox_provider

__all__ = ["_session_cache", "dep_task", "env_cache", "sandbox_provider", "wheelhouse"]
