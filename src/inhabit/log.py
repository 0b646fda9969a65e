"""Logging for inhabit: one call to set it up, `get_logger(__name__)` everywhere else.

Logs go to stderr through rich when stderr is a terminal (readable, coloured) and as plain lines
otherwise (CI, pipes), so machine-readable stdout (for example `inhabit replay --json`) is never
polluted. The level comes from the argument or from INHABIT_LOG_LEVEL.
"""

from __future__ import annotations

import logging
import os
import sys

_CONFIGURED = False


def setup_logging(level: str | int | None = None) -> None:
    """Configure the `inhabit` logger once; later calls only change the level."""
    global _CONFIGURED
    level = level or os.environ.get("INHABIT_LOG_LEVEL", "INFO")
    if isinstance(level, str):
        level = level.upper()
    root = logging.getLogger("inhabit")
    root.setLevel(level)
    if _CONFIGURED:
        return
    handler: logging.Handler
    if sys.stderr.isatty():
        from rich.logging import RichHandler

        handler = RichHandler(show_path=False, rich_tracebacks=True)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
    else:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.propagate = False
    _CONFIGURED = True


def quiet_third_party_progress() -> None:
    """No tqdm bars from transformers or huggingface_hub (e.g. "Loading weights" when a model
    folder loads): inhabit's commands report their own progress, and those bars would land in the
    middle of a command's output. Both libraries read this variable when they are imported."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" in sys.modules:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()


def get_logger(name: str) -> logging.Logger:
    """Return a logger under the `inhabit` namespace (pass `__name__`)."""
    if not name.startswith("inhabit"):
        name = f"inhabit.{name}"
    return logging.getLogger(name)
