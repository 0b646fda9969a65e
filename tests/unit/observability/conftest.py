"""Fixtures for the viewer tests: see tests/viewer_fixtures.py (shared with the browser tests)."""

from viewer_fixtures import run_dir

__all__ = ["run_dir"]
