"""`SpecializeConfig`: the settings of `inhabit specialize`, with defaults for a CPU and a small
model; a TOML file (`--config`, e.g. configs/examples/specialize-gpu-vllm.toml) and dotted
overrides change them. The budget (`--budget 2h`) is split across the steps up front (`plan`).

    [tasks]      how many mutants to try, the held-out share (split by module)
    [eval]       held-out tasks and samples of the baseline and of the final evaluation
    [bootstrap]  the format bootstrap: when it runs, how long, when it stops
    [harness] [engine] [trainer] [rollout] [sandbox]   as in `inhabit train` (RunConfig)
    training     auto: LoRA adapters on a real model (>= lora_from_params parameters), full
                 fine-tuning of a tiny one (`rl_trainer`)
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from inhabit.config import Config
from inhabit.errors import ConfigError
from inhabit.harness.config import HarnessConfig
from inhabit.placement.engine_backends import RunEngineConfig
from inhabit.rollouts import RolloutConfig
from inhabit.sandbox import SandboxConfig
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.lora import LoraSettings

__all__ = ["BudgetPlan", "SpecializeConfig", "folder_parameters", "parse_budget", "plan", "rl_trainer"]


class SpecializeTasksConfig(Config):
    """Tasks from the repository (`inhabit tasks build`) and their split."""

    max_candidates: int = Field(60, ge=2, description="Mutants tried at most (each runs the suite once).")
    concurrency: int = Field(2, ge=1, description="Sandboxes running mutants at once.")
    held_out_share: float = Field(0.3, gt=0, lt=1, description="Share of tasks held out (whole modules).")
    env: str = Field("auto", pattern="^(auto|none)$", description="auto: the project's test environment.")
    seed: int = Field(0, ge=0, description="Seed of the build's samples and of the split.")


class SpecializeEvalConfig(Config):
    """The held-out evaluations (baseline and final): the same tasks and samples on both sides."""

    max_tasks: int = Field(24, ge=1, description="Held-out tasks evaluated at most (the first by id).")
    samples: int = Field(4, ge=1, description="Samples per task (pass@k is reported for k = samples).")
    concurrency: int = Field(4, ge=1, description="Episodes at once.")
    temperature: float = Field(1.0, ge=0, description="Sampling temperature of the evaluations.")


class SpecializeBootstrapConfig(Config):
    """The format bootstrap: a supervised stage on the generated family's scripted expert's
    transcripts, only when the baseline's turns do not parse as tool calls."""

    when_parse_below: float = Field(
        0.5, ge=0, le=1, description="Run it when fewer than this share of baseline turns parse as calls."
    )
    stop_at_parse: float = Field(0.8, ge=0, le=1, description="Stop once this share of probe turns parse.")
    max_steps: int = Field(300, ge=0, description="Optimizer steps at most (0: never bootstrap).")
    check_every: int = Field(50, ge=1, description="Probe the parse rate every N steps.")
    probe_turns: int = Field(8, ge=1, description="First turns generated on the family's tasks per probe.")
    transcripts: int = Field(48, ge=1, description="Expert transcripts (quickstart family tasks) to imitate.")
    batch_size: int = Field(4, ge=1, description="Transcripts per step.")
    lr: float = Field(1e-4, gt=0, le=1, description="Peak AdamW learning rate.")


class SpecializeConfig(Config):
    """Everything `inhabit specialize` runs with (see module docstring)."""

    tasks: SpecializeTasksConfig = Field(default_factory=SpecializeTasksConfig)
    eval: SpecializeEvalConfig = Field(default_factory=SpecializeEvalConfig)
    bootstrap: SpecializeBootstrapConfig = Field(default_factory=SpecializeBootstrapConfig)
    harness: HarnessConfig = Field(
        default_factory=lambda: HarnessConfig(max_turns=6, max_turn_tokens=256),
        description="The agent loop of every episode (baseline, RL and final evaluation alike).",
    )
    # The engine shares the process with the trainer, and a ~135M model's 49k-entry vocabulary
    # makes a 4,096-token micro-batch's logits alone 0.8 GB (twice, with their log-softmax): these
    # keep one run near 10 GB, so that two fit a 24 GB machine.
    engine: RunEngineConfig = Field(
        default_factory=lambda: RunEngineConfig(max_model_len=4096, kv_cache_gb=2),
        description="The inference engine: embedded on a CPU; vllm on a GPU node.",
    )
    trainer: TrainerConfig = Field(default_factory=lambda: TrainerConfig(lr=1e-5, micro_batch_tokens=2048))
    rollout: RolloutConfig = Field(
        default_factory=lambda: RolloutConfig(group_size=4, tasks_per_step=2, concurrency=8, max_tokens=256)
    )
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    rl_max_steps: int = Field(200, ge=0, description="RL steps at most (the budget usually ends RL first).")
    training: Literal["auto", "lora", "full"] = Field(
        "auto",
        description="What RL trains: auto is LoRA adapters for a model of lora_from_params parameters or "
        "more, full fine-tuning below; lora and full force one. trainer.lora, when set, is LoRA with its "
        "settings and trainer.lr.",
    )
    lora_from_params: int = Field(
        50_000_000, ge=1, description="training=auto uses LoRA from this many parameters of the start model."
    )
    lora: LoraSettings = Field(
        default_factory=lambda: LoraSettings(rank=16, alpha=32.0),
        description="The adapters of a LoRA chosen by `training` (trainer.lora unset).",
    )
    lora_lr: float = Field(
        1e-4,
        gt=0,
        le=1,
        description="RL's learning rate with those adapters (trainer.lr is full fine-tuning's).",
    )
    gate_noise: float = Field(
        1.0,
        ge=0,
        description="The gate refuses the trained model when its held-out success is below the start's "
        "by more than this many half-widths of the start's 90% Wilson interval (its noise).",
    )
    threads: int | None = Field(None, ge=1, description="torch threads (None: torch's default).")
    seed: int = Field(0, ge=0, description="Seeds sampling, the split and the trainer.")

    @model_validator(mode="after")
    def _check(self) -> SpecializeConfig:
        if self.trainer.temperature != self.rollout.temperature:
            raise ValueError("trainer.temperature must equal rollout.temperature (see `inhabit train`)")
        return self


def folder_parameters(folder: Path) -> int:
    """Parameters stored in a model folder's safetensors files, read from their headers (no tensor
    is loaded)."""
    from safetensors import safe_open

    total = 0
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():  # noqa: SIM118 (safe_open has keys(), no iteration)
                n = 1
                for d in st.get_slice(name).get_shape():
                    n *= d
                total += n
    return total


def rl_trainer(cfg: SpecializeConfig, params: int) -> tuple[TrainerConfig, str]:
    """RL's trainer settings for a start model of `params` parameters, and what they train in
    words (for the display and the report). A real model trains LoRA adapters by default: the
    optimizer's state and each published version are the adapters' size, not the model's."""
    if cfg.trainer.lora is not None:
        lora, lr = cfg.trainer.lora, cfg.trainer.lr
    elif cfg.training == "full" or (cfg.training == "auto" and params < cfg.lora_from_params):
        return cfg.trainer, f"full fine-tuning of {params / 1e6:.1f}M parameters, lr {cfg.trainer.lr:g}"
    else:
        lora, lr = cfg.lora, cfg.lora_lr
    trainer = TrainerConfig.model_validate(cfg.trainer.model_dump() | {"lora": lora.model_dump(), "lr": lr})
    return (
        trainer,
        f"LoRA rank {lora.rank} (alpha {lora.alpha:g}) on a {params / 1e6:.1f}M-parameter model, lr {lr:g}",
    )


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_budget(text: str) -> float:
    """Seconds of a budget such as "2h", "90m", "1h30m", "45s" or a bare number of seconds."""
    t = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", t):
        seconds = float(t)
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)\s*([smhd])", t)
        if not parts or re.sub(r"\s+", "", "".join(n + u for n, u in parts)) != re.sub(r"\s+", "", t):
            raise ConfigError(f"--budget {text!r}: write a duration such as 2h, 90m, 1h30m or 600s")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds < 60:
        raise ConfigError(f"--budget {text!r}: give at least one minute")
    return seconds


SHARES = {"tasks": 0.25, "baseline": 0.15, "bootstrap": 0.15}
"""The budget's split: the task build, the baseline and the bootstrap stop at their share (the
baseline keeps the tasks and samples it finished in full, and the final evaluation runs those, so
both sides stay paired); RL gets what is left, minus the final evaluation's expected time (the
baseline's measured one: the same episodes)."""


@dataclass(frozen=True)
class BudgetPlan:
    total_s: float

    def share_s(self, step: str) -> float:
        return self.total_s * SHARES[step]

    def lines(self) -> list[str]:
        """The split as stated up front."""
        m = self.total_s / 60
        return [
            f"budget {m:.0f} min: tasks <= {SHARES['tasks']:.0%} (the build stops there, or at tasks.max_candidates), "
            f"baseline <= {SHARES['baseline']:.0%} (at most eval.max_tasks x eval.samples; the part finished by then is kept "
            "and the final evaluation runs the same), "
            f"format bootstrap <= {SHARES['bootstrap']:.0%} (only when calls do not parse), "
            "RL: the rest, less the final evaluation's expected time (the baseline's)"
        ]


def plan(total_s: float) -> BudgetPlan:
    return BudgetPlan(total_s)
