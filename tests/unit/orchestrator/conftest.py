"""Fixtures of the orchestrator tests: see tests/expert_fixtures.py (shared with the taskgen tests)."""

from expert_fixtures import play_multistep_expert

__all__ = ["play_multistep_expert"]
