"""Fixtures for grading tests: see `inhabit.tasks.fixtures` (shared with the task tests)."""

from inhabit.tasks.fixtures import FAST_COMMAND, calc_task, fast_command, make_task, sandbox_provider

__all__ = ["FAST_COMMAND", "calc_task", "fast_command", "make_task", "sandbox_provider"]
