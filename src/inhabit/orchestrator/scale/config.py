"""`ScaleConfig`: one simulated scenario (`inhabit scale simulate CONFIG`, bench/scale.py).

The run shape (engines, sandboxes, G, tasks per step, staleness, oversampling, deadline) goes to
the real orchestration code; the models below describe the simulated parts. Every default is a
measurement of the real part on this project's machines (docs/scale.md says which); a TOML file
overrides any of them:

    engines = 1000
    sandboxes = 100000
    [episode.exec_s]
    kind = "pareto"
    ...
"""

from __future__ import annotations

import math
import random
from typing import Literal

from pydantic import Field

from inhabit.config import Config


class Dist(Config):
    """A positive random duration or count: lognormal (median, sigma), Pareto (scale x_m, alpha),
    or drawn from recorded values (`empirical`: what `inhabit scale calibrate` writes); optionally
    capped."""

    kind: Literal["lognormal", "pareto", "fixed", "empirical"] = "lognormal"
    median: float = Field(1.0, gt=0, description="lognormal: the median; fixed: the value.")
    sigma: float = Field(0.5, ge=0, description="lognormal: sd of the log.")
    scale: float = Field(1.0, gt=0, description="pareto: x_m, the smallest value.")
    alpha: float = Field(2.0, gt=0, description="pareto: tail index (smaller: heavier tail).")
    cap: float | None = Field(None, gt=0, description="Largest value drawn (None: uncapped).")
    values: list[float] = Field(default_factory=list, description="empirical: the recorded values.")

    def draw(self, rng: random.Random) -> float:
        if self.kind == "fixed":
            x = self.median
        elif self.kind == "empirical":
            if not self.values:
                raise ValueError("an empirical distribution needs `values`")
            x = rng.choice(self.values)
        elif self.kind == "lognormal":
            x = self.median * math.exp(rng.gauss(0.0, self.sigma))
        else:
            x = self.scale / (1.0 - rng.random()) ** (1.0 / self.alpha)
        return min(x, self.cap) if self.cap is not None else x


class EngineModel(Config):
    """One inference engine: a decode step costs `step_s + per_seq_s * batch`; every running
    sequence gains one token per step (processor sharing)."""

    step_s: float = Field(0.010, gt=0, description="Fixed cost of one decode step (s).")
    per_seq_s: float = Field(0.0012, ge=0, description="Added cost per sequence in the batch (s).")
    max_batch: int = Field(64, ge=1, description="Sequences decoded together; more wait for a row.")
    prefill_tokens_per_s: float = Field(4000.0, gt=0, description="Prompt tokens prefilled per second.")
    swap_pause_s: float = Field(0.041, ge=0, description="Decoding stops this long to swap in new weights.")
    restart_s: float = Field(
        60.0, ge=0, description="A crashed engine is back (with new weights) after this."
    )


class EpisodeModel(Config):
    """One rollout: sandbox creation, turns (prompt, generated tokens, tool execution), grading."""

    turns: Dist = Field(default_factory=lambda: Dist(kind="lognormal", median=1.7, sigma=0.3, cap=4))
    prompt_tokens: Dist = Field(default_factory=lambda: Dist(median=72, sigma=0.3))
    completion_tokens: Dist = Field(default_factory=lambda: Dist(median=31, sigma=0.58, cap=96))
    create_s: Dist = Field(default_factory=lambda: Dist(median=0.05, sigma=0.5))
    exec_s: Dist = Field(default_factory=lambda: Dist(median=0.0021, sigma=1.88))
    grade_s: Dist = Field(default_factory=lambda: Dist(median=24.7, sigma=0.37))
    reward_p: float = Field(0.5, ge=0, le=1, description="Chance a rollout earns reward 1 (else 0).")


class TrainerModel(Config):
    """One optimizer step: `step_s + per_token_s * tokens / data_parallel` (tokens of the step's
    samples, split evenly over the data-parallel ranks; `step_s` holds what does not shrink with
    them: the optimizer, the gradient all-reduce, publishing the weights)."""

    step_s: float = Field(0.05, ge=0)
    per_token_s: float = Field(
        0.0007, ge=0, description="Seconds per token on one rank (forward, backward), as measured."
    )
    data_parallel: int = Field(1, ge=1, description="Data-parallel trainer ranks.")


class ClusterModel(Config):
    """A group of engines behind one link from the trainer's weight store."""

    share: float = Field(1.0, gt=0, description="Share of the engines in this cluster (normalized).")
    link_gbps: float = Field(10.0, gt=0, description="Bandwidth of the store -> cluster link (Gbit/s).")
    latency_s: float = Field(0.001, ge=0, description="One-way latency of the link.")
    relay: bool = Field(
        True,
        description="The cluster fetches each delta once over the link and fans it out inside "
        "(intra_gbps); False: every engine fetches it over the shared link.",
    )
    intra_gbps: float = Field(100.0, gt=0, description="Bandwidth per engine inside the cluster.")


class NetworkModel(Config):
    delta_bytes: float = Field(
        1.3e6, gt=0, description="Bytes of one weight delta (bench/weights.py: ~50x below the bf16 state)."
    )
    clusters: list[ClusterModel] = Field(default_factory=lambda: [ClusterModel()])


class FaultModel(Config):
    engine_crashes_per_engine_hour: float = Field(0.0, ge=0)
    env_server_losses_per_server_hour: float = Field(0.0, ge=0)
    env_server_restart_s: float = Field(30.0, ge=0)
    slow_fraction: float = Field(
        0.0, ge=0, le=1, description="Share of engines and env servers that are slow."
    )
    slow_factor: float = Field(3.0, ge=1, description="How much slower a slow node is.")


class ScaleConfig(Config):
    """One scenario (module docstring)."""

    name: str = "scenario"
    engines: int = Field(2, ge=1, le=100_000)
    sandboxes: int = Field(32, ge=1, description="Concurrent rollouts (rollout.concurrency).")
    sandboxes_per_env_server: int = Field(100, ge=1)
    group_size: int = Field(4, ge=1)
    tasks_per_step: int | None = Field(
        None, ge=1, description="Groups per trainer step; None: see `fleet_steps`."
    )
    fleet_steps: float | None = Field(
        None,
        gt=0,
        description="With tasks_per_step None: how many steps' worth of groups the sandboxes hold at "
        "once (None: max_staleness + 1, so every group the bound admits runs at once). 1: a step's "
        "worth fills the sandboxes, and the groups admitted beyond it wait for a sandbox before they "
        "generate a token, so a version lasts about a group's lifetime instead of a third of it.",
    )
    max_staleness: int = Field(2, ge=0)
    mode: Literal["async", "sync"] = "async"
    stale_policy: Literal["drop", "inflight", "partial"] = Field(
        "inflight", description="What the bound costs a slow rollout (the run config's `stale_policy`)."
    )
    partial_age: int = Field(1, ge=1, description='stale_policy = "partial": pause at this age (versions).')
    oversample: int = Field(0, ge=0)
    deadline_s: float | None = Field(None, gt=0)
    timeout_s: float = Field(600.0, gt=0)
    measure: Literal["steady", "whole"] = Field(
        "steady",
        description="steady: the measured steps of a run in full flow (see measure_steps); whole: a "
        "run of measure_steps steps measured from start to end, as `inhabit train` reports it.",
    )
    measure_steps: int = Field(
        2,
        ge=1,
        description="Trainer steps measured. The run adds max_staleness + 1 steps before them (the "
        "pipeline filling up) and as many after (the producer stops starting groups that many "
        "steps before the end); neither is measured.",
    )
    tasks: int = Field(1000, ge=2, description="Distinct train tasks.")
    seed: int = 0
    quantum_s: float = Field(
        1e-3, gt=0, le=1, description="Timers due this close together run in one event-loop cycle."
    )
    engine: EngineModel = Field(default_factory=EngineModel)
    episode: EpisodeModel = Field(default_factory=EpisodeModel)
    trainer: TrainerModel = Field(default_factory=TrainerModel)
    network: NetworkModel = Field(default_factory=NetworkModel)
    faults: FaultModel = Field(default_factory=FaultModel)

    @property
    def margin_steps(self) -> int:
        """Unmeasured steps at each end (see `measure_steps`)."""
        if self.measure == "whole":
            return 0
        return 1 if self.mode == "sync" else self.max_staleness + 1

    @property
    def steps(self) -> int:
        return self.measure_steps + 2 * self.margin_steps

    @property
    def groups_per_step(self) -> int:
        """tasks_per_step, or the number that keeps every sandbox busy while `fleet_steps` steps'
        groups are running (default `max_staleness + 1`: the bound's room; one step's fewer while
        the trainer trains a step)."""
        if self.tasks_per_step is not None:
            return self.tasks_per_step
        per_group = self.group_size + self.oversample
        steps = self.fleet_steps if self.fleet_steps is not None else self.max_staleness + 1
        return max(1, int(self.sandboxes // (per_group * steps)))

    @property
    def env_servers(self) -> int:
        return max(1, math.ceil(self.sandboxes / self.sandboxes_per_env_server))
