"""pytest fixtures shared by the task-generation and orchestrator tests: the multistep family's
scripted expert played through the harness and a real sandbox.

The conftest.py of tests/unit/taskgen and tests/unit/orchestrator import it from here (pytest puts
tests/, the root conftest's folder, on sys.path).
"""

from __future__ import annotations

import asyncio

import pytest

from inhabit.harness.config import HarnessConfig
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.taskgen.families.multistep_expert import ExpertStyle, multistep_transcripts


@pytest.fixture(scope="session")
def play_multistep_expert():
    """play(tasks, roots, tokenizer, seed=, grade=True, window=1024, style=) -> the scripted expert's
    transcripts through the harness and a real sandbox, with configs/multistep.toml's harness
    settings; `window` is the context window of the model that will imitate them (the config's)."""
    harness = HarnessConfig(
        max_turns=12, max_turn_tokens=128, summary_max_tokens=128, observation_max_chars=1600, max_summaries=6
    )

    def play(
        tasks, roots, tokenizer, *, seed: int, grade: bool = True, window: int = 1024, style=ExpertStyle()
    ):
        async def main():
            provider = create_provider(SandboxConfig())
            try:
                return await multistep_transcripts(
                    list(zip(tasks, roots, strict=True)), provider, harness, tokenizer, window,
                    seed=seed, grade=grade, style=style,
                )  # fmt: skip
            finally:
                await provider.close()

        return asyncio.run(main())

    return play
