"""Commands that the orchestrator part adds to `inhabit`: the quickstart (main job of the README).

Until the RL pipeline lands, `inhabit quickstart` runs the sandbox demo on the embedded default
backend; heavy imports stay inside command bodies.
"""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""

    @app.command()
    def quickstart() -> None:
        """Run the main job on the embedded default (for now: the sandbox demo)."""
        import asyncio

        from inhabit.sandbox.demo import run_demo

        asyncio.run(run_demo())
