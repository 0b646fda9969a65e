"""Commands that the evaluation part adds to `inhabit` (heavy imports stay inside command bodies)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
