"""`RolloutConfig`: the `[rollout]` table of a run: G per task, tasks per step, concurrency, sampling."""

from __future__ import annotations

from pydantic import Field

from inhabit.config import Config


class RolloutConfig(Config):
    """How rollouts are generated."""

    group_size: int = Field(8, ge=1, le=1024, description="G: rollouts per task (one group).")
    tasks_per_step: int = Field(4, ge=1, description="Groups the trainer consumes per step.")
    concurrency: int = Field(
        16,
        ge=1,
        description="Episodes (with their grading) running at the same time; a group whose G fits "
        "starts its G episodes together, when G slots are free.",
    )
    temperature: float = Field(1.0, gt=0, le=10, description="Sampling temperature.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling.")
    max_tokens: int = Field(256, ge=8, description="Tokens one model turn may generate.")
    timeout_s: float = Field(
        600.0, gt=0, description="Wall-clock cap on one rollout (episode + grading); past it: status error."
    )
    train_zero_advantage: bool = Field(
        False,
        description="Also train groups whose rollouts all got the same reward (their gradient is zero; "
        "the step still runs and the version moves: for tests and timing, not for learning).",
    )
    min_group_size: int = Field(
        2, ge=1, description="A group trains only if at least this many rollouts did not fail."
    )
