"""Fixtures for task-generation tests: see tests/task_fixtures.py and tests/expert_fixtures.py."""

from expert_fixtures import play_multistep_expert
from task_fixtures import FAST_COMMAND, calc_task, chat_server, fast_command, make_task, sandbox_provider

__all__ = [
    "FAST_COMMAND",
    "calc_task",
    "chat_server",
    "fast_command",
    "make_task",
    "play_multistep_expert",
    "sandbox_provider",
]
