"""`HarnessConfig`: every knob of the agent loop and its tools, with bounds.

The same config drives `inhabit agent` and RL rollouts; nothing in it says which one is running.
"""

from __future__ import annotations

import shlex
import sys
from typing import Literal

from pydantic import Field

from inhabit.config import Config


class HarnessConfig(Config):
    """Limits of one episode, of the context, and of each tool's observation."""

    tool_format: Literal["auto", "xml", "native"] = Field(
        "auto",
        description="How tools reach the model. xml: the harness's own <tool> text format, described in "
        "the system prompt; native: the model's own format, the tools given to its chat template as "
        "`tools` and the results returned as `tool` messages; auto: native when the policy's chat "
        "template renders `tools`, xml otherwise (for endpoints: native when the endpoint reports that it "
        "parses its model's own call format, as `inhabit serve` does in /v1/models).",
    )
    max_turns: int = Field(
        40, ge=1, le=10_000, description="Model turns (not counting summaries) before the episode stops."
    )
    max_turn_tokens: int = Field(2048, ge=16, description="Tokens the policy may generate in one turn.")
    max_total_tokens: int = Field(
        200_000, ge=16, description="Tokens generated over the whole episode (all turns and summaries)."
    )
    context_budget: int | None = Field(
        None,
        ge=256,
        description="Context tokens past which the loop summarizes; None means the policy's context_window.",
    )
    summary_max_tokens: int = Field(768, ge=16, description="Tokens the policy may spend on one summary.")
    max_summaries: int = Field(
        16, ge=0, description="Summaries per episode before it stops with `context_overflow`."
    )
    max_parallel_calls: int = Field(16, ge=1, description="Tool calls of one turn that run at the same time.")
    tool_timeout_s: float = Field(
        900.0,
        gt=0,
        description="Wall-clock cap on any single tool call (run and run_tests have their own too).",
    )
    observation_max_chars: int = Field(
        12_000,
        ge=500,
        description="Characters of one observation; longer ones keep head and tail around a marker.",
    )
    read_file_max_lines: int = Field(
        400, ge=10, description="Lines read_file shows when no end_line is given."
    )
    grep_max_matches: int = Field(200, ge=1, description="Matching lines grep reports.")
    list_dir_max_entries: int = Field(400, ge=10, description="Entries list_dir shows.")
    list_dir_default_depth: int = Field(2, ge=1, le=20, description="Depth of list_dir when none is given.")
    run_default_timeout_s: float = Field(60.0, gt=0, description="Timeout of `run` when the call gives none.")
    run_max_timeout_s: float = Field(
        600.0, gt=0, description="Upper bound on the timeout_s a `run` call may ask for."
    )
    test_command: str | None = Field(
        None,
        description="run_tests command when the task has none (e.g. `inhabit agent` on a repository); "
        "None: `python -m pytest` when the sandbox's python has pytest, else the Python running inhabit.",
    )
    test_timeout_s: float = Field(300.0, gt=0, description="Timeout of one run_tests call.")
    ruff_command: str | None = Field(
        None,
        description="How the lint tool invokes ruff in the sandbox; None: ruff of the Python running inhabit.",
    )
    semantic_chunk_lines: int = Field(
        40, ge=5, le=400, description="Lines per chunk that semantic_search embeds."
    )
    semantic_max_files: int = Field(3000, ge=1, description="Source files semantic_search indexes at most.")
    semantic_max_file_bytes: int = Field(
        200_000, ge=1000, description="Larger files are left out of the index."
    )
    semantic_default_top_k: int = Field(
        5, ge=1, le=100, description="Results semantic_search returns by default."
    )

    def ruff_invocation(self, args: str) -> str:
        """Shell text running ruff with `args`: the configured command, else `ruff` on the sandbox's
        PATH, else the ruff module of the Python running inhabit (a process sandbox's PATH need not
        hold the venv that ships ruff; an isolating one may not see this interpreter)."""
        if self.ruff_command:
            return f"{self.ruff_command} {args}"
        fallback = f"{shlex.quote(sys.executable)} -m ruff"
        return f"if command -v ruff >/dev/null 2>&1; then ruff {args}; else {fallback} {args}; fi"
