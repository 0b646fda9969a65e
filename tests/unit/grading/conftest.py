"""Fixtures for grading tests: see tests/task_fixtures.py (shared with the task and evaluation tests)."""

from task_fixtures import FAST_COMMAND, calc_task, chat_server, fast_command, make_task, sandbox_provider

__all__ = ["FAST_COMMAND", "calc_task", "chat_server", "fast_command", "make_task", "sandbox_provider"]
