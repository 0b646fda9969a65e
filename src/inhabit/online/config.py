"""Configuration of online learning: who opted in, how signals become rewards, how the loop runs.

A repository opts in with `.inhabit/online.toml` (`RepoOptIn`):

    enabled = true
    store = "/srv/inhabit/online/sessions.db"   # default: $INHABIT_ONLINE_STORE, else ~/.inhabit/online/sessions.db

`inhabit online run --config online.toml` reads an `OnlineConfig` (store, weights, cycle, train,
gate, watch, and the `[rewards]` table); docs/online.md shows a full file.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import Field, model_validator

from inhabit.config import Config, read_toml, validate_config
from inhabit.sandbox.backends import LocalSandboxBackendName
from inhabit.trainer.config import TrainerConfig

OPT_IN_FILE = Path(".inhabit") / "online.toml"
DEFAULT_STORE = Path("~/.inhabit/online/sessions.db")


def default_store() -> Path:
    """$INHABIT_ONLINE_STORE, else ~/.inhabit/online/sessions.db."""
    env = os.environ.get("INHABIT_ONLINE_STORE")
    return Path(env).expanduser() if env else DEFAULT_STORE.expanduser()


class RepoOptIn(Config):
    """`<repo>/.inhabit/online.toml`: whether this repository's sessions are recorded, and where."""

    enabled: bool = Field(False, description="Record this repository's `inhabit agent` sessions.")
    store: str | None = Field(None, description="Session store file (default: see default_store()).")
    logprobs: bool = Field(
        True, description="Ask the endpoint for token logprobs (needed to train on the sessions)."
    )

    def store_path(self) -> Path:
        return Path(self.store).expanduser() if self.store else default_store()


def repo_opt_in(repo: Path) -> RepoOptIn | None:
    """The repository's opt-in when it has one that is enabled, else None."""
    path = repo / OPT_IN_FILE
    if not path.is_file():
        return None
    cfg = validate_config(RepoOptIn, read_toml(path), source=str(path))
    return cfg if cfg.enabled else None


class RewardConfig(Config):
    """How a session's signals become one reward (docs/online.md, "Rewards").

    Each kind's weight multiplies the value of the newest signal of that kind (accepted, rejected,
    kept, reverted: 1; rating: +1 good, -1 bad; tests_passed: +1 passed, -1 failed); the weighted
    sum is clipped to [min_reward, max_reward]. Kinds not in `weights` are stored but ignored.
    """

    weights: dict[str, float] = Field(
        default_factory=lambda: {
            "accepted": 1.0,
            "rejected": -1.0,
            "rating": 1.0,
            "kept": 0.5,
            "reverted": -1.0,
            "tests_passed": 0.5,
        },
        description="Signal kind -> weight of its newest value.",
    )
    min_reward: float = Field(-1.0, description="Lower clip of the summed reward.")
    max_reward: float = Field(1.0, description="Upper clip of the summed reward.")
    settle_s: float = Field(
        0.0, ge=0.0, description="Seconds after a session's newest signal before it is harvested."
    )
    accept_kinds: dict[str, bool] = Field(
        default_factory=lambda: {"accepted": True, "rejected": False},
        description="Signals that count as one acceptance trial for live figures (kind -> accepted?); "
        "a rating counts when no such signal exists (good = accepted).",
    )

    @model_validator(mode="after")
    def _check(self) -> RewardConfig:
        if self.min_reward > self.max_reward:
            raise ValueError("min_reward must not exceed max_reward")
        return self


class CycleConfig(Config):
    """When a cycle runs."""

    min_sessions: int = Field(8, ge=1, description="Rated, unused sessions that start a cycle.")
    max_wait_s: float = Field(
        3600.0, gt=0, description="A cycle also starts after this long with at least one rated session."
    )
    poll_s: float = Field(5.0, gt=0, description="Seconds between looks at the store.")
    max_sessions: int = Field(256, ge=1, description="Most sessions one cycle trains on (oldest first).")


class OnlineTrainConfig(Config):
    """The online update (train.py)."""

    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    updates: int = Field(1, ge=1, le=64, description="Optimizer updates over one cycle's batch.")
    max_lag: int = Field(
        2,
        ge=0,
        description="Sessions generated more than this many versions before the deployed one are dropped.",
    )
    kl_coef: float = Field(0.05, ge=0.0, description="Weight of the KL(candidate || deployed) anchor (k3).")
    baseline_decay: float = Field(
        0.9, ge=0.0, lt=1.0, description="The reward baseline is an EMA over cycles with this decay."
    )


class GateConfig(Config):
    """Held-out offline tasks a candidate must not regress on."""

    tasks: str | None = Field(
        None, description="Folder of task directories (inhabit eval); None: no gate (every candidate passes)."
    )
    samples: int = Field(1, ge=1, description="Rollouts per task.")
    tolerance: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="Refuse when success rate drops more than this below the deployed one.",
    )
    max_turns: int = Field(8, ge=1, description="Turn limit of gate rollouts.")
    max_turn_tokens: int = Field(512, ge=16, description="Tokens one turn of a gate rollout may generate.")
    sandbox: LocalSandboxBackendName = Field(
        "process", description="Sandbox backend of gate rollouts (one that runs on this machine)."
    )
    concurrency: int = Field(2, ge=1, description="Gate rollouts at once.")


class WatchConfig(Config):
    """Live comparison of the newest version with the one before it."""

    min_sessions: int = Field(20, ge=1, description="Trials of the new version before it is judged.")
    confidence: float = Field(0.95, gt=0.5, lt=1.0, description="Two-sided confidence of the interval.")
    rollback: bool = Field(True, description="Roll back when the new version is worse with that confidence.")


class OnlineConfig(Config):
    """`inhabit online run`: the store, the weights, and each stage of the cycle."""

    store: str = Field(..., description="Session store file (SQLite).")
    weights: str = Field(
        ..., description="Weight store (folder or fsspec URL) that `inhabit serve --follow` reads."
    )
    workdir: str | None = Field(
        None, description="Checkpoints and candidates (default: <store>.online/ beside the store)."
    )
    publish_dtype: str = Field("float32", description="Dtype of published weights (bfloat16 for GPUs).")
    full_every: int = Field(10, ge=1, description="A full weight snapshot every this many versions.")
    rewards: RewardConfig = Field(default_factory=RewardConfig)
    cycle: CycleConfig = Field(default_factory=CycleConfig)
    train: OnlineTrainConfig = Field(default_factory=OnlineTrainConfig)
    gate: GateConfig = Field(default_factory=GateConfig)
    watch: WatchConfig = Field(default_factory=WatchConfig)

    def workdir_path(self) -> Path:
        return Path(self.workdir) if self.workdir else Path(self.store + ".online")
