"""`TrainerConfig`: optimizer, schedule, micro-batching, loss and router replay of the RL trainer.

In a run TOML it is the `[trainer]` table (with `[trainer.loss]` for the `LossConfig`):

    [trainer]
    lr = 1e-4
    micro_batch_tokens = 4096
    [trainer.loss]
    variant = "sequence"
    eps_low = 3e-4
    eps_high = 4e-4
    [trainer.lora]            # optional: LoRA adapters instead of full fine-tuning
    rank = 16

`TrainerRunSettings` is the trainer's slice of a whole run's settings (the `[trainer]` table plus
the run's `max_staleness` and the trainer's thread count), what every trainer handle passes on.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inhabit.config import Config
from inhabit.trainer.lora import LoraSettings
from inhabit.trainer.losses import LossConfig


class TrainerConfig(Config):
    """Everything `Trainer` needs besides the model (see docs/trainer.md)."""

    lr: float = Field(1e-5, gt=0.0, le=1.0, description="Peak learning rate of AdamW.")
    betas: tuple[float, float] = Field((0.9, 0.999), description="AdamW betas.")
    adam_eps: float = Field(1e-8, gt=0.0, description="AdamW epsilon.")
    weight_decay: float = Field(0.0, ge=0.0, le=1.0, description="AdamW decoupled weight decay.")
    grad_clip: float | None = Field(
        1.0, gt=0.0, description="Clip the global grad norm to this; None: no clip."
    )
    schedule: Literal["constant", "linear", "cosine"] = Field(
        "constant", description="Learning-rate shape after warm-up (linear/cosine decay to min_lr_ratio*lr)."
    )
    warmup_steps: int = Field(0, ge=0, description="Optimizer updates of linear warm-up from 0 to lr.")
    total_steps: int | None = Field(
        None, ge=1, description="Optimizer updates the decay spans (needed by linear and cosine)."
    )
    min_lr_ratio: float = Field(0.0, ge=0.0, le=1.0, description="Floor of the decay, as a fraction of lr.")
    micro_batch_tokens: int = Field(
        4096, ge=16, description="Padded tokens (rows x longest row) per forward; gradients accumulate."
    )
    updates_per_step: int = Field(
        1,
        ge=1,
        le=64,
        description="Optimizer updates per train_step (the batch is split into this many mini-batches; "
        ">1 makes the PPO clip bind). The policy version still advances by one per train_step.",
    )
    epochs: int = Field(
        1,
        ge=1,
        le=64,
        description="Passes over the batch per train_step (PPO's epochs, GRPO's iterations): each pass "
        "runs the updates_per_step mini-batch updates again, all against the proximal logprobs taken "
        "before the first; a step costs about epochs times the compute of one pass.",
    )
    temperature: float = Field(
        1.0,
        gt=0.0,
        description="Sampling temperature of the rollouts: logits are divided by it, as the "
        "engine does for its (tempered) logprobs. Must match the engine's sampling.",
    )
    loss: LossConfig = Field(default_factory=LossConfig, description="Policy loss (see losses.py).")
    kl_coef: float = Field(
        0.0,
        ge=0.0,
        description="Weight of a KL anchor to the starting policy: kl_coef times the k3 estimate of "
        "KL(policy || start) per generated token, from reference logprobs the trainer computes with a "
        "frozen copy of the weights it started from (kept in checkpoints). 0: no anchor, no copy.",
    )
    normalize_advantage_std: bool = Field(
        False, description="Divide group-centred rewards by the group's std (GRPO) or not (Dr. GRPO)."
    )
    router_replay: bool = Field(
        True, description="MoE: force the experts the engine chose (when samples carry routes)."
    )
    deterministic: bool = Field(
        False,
        description="Recompute logprobs (and MoE routes) with the engine's batch-invariant kernels, so "
        "they equal those of an engine with engine.deterministic bit for bit (mismatch 0, on-policy "
        "ratio exactly 1); gradients still come from the standard forward. CPU only.",
    )
    deterministic_dtype: Literal["float32", "bfloat16"] = Field(
        "float32",
        description="dtype of the deterministic recomputation: set it to the engine's engine.dtype "
        "(the fp32 weights are rounded to it exactly as the engine rounds the weights it is sent).",
    )
    seed: int = Field(0, ge=0, description="Seeds torch, python and numpy RNGs when the Trainer is built.")
    device: str = Field(
        "cpu",
        description="torch device of the trained model; with data_parallel on CUDA each rank takes cuda:LOCAL_RANK.",
    )
    num_threads: int | None = Field(
        None, ge=1, le=512, description="torch intra-op threads (default: torch's)."
    )
    data_parallel: int = Field(
        1,
        ge=1,
        le=1024,
        description="Trainer processes (torch.distributed, FSDP2-sharded model; gloo on CPU, NCCL on "
        "CUDA). inhabit starts them itself, or takes the ranks of `torchrun` (docs/trainer.md).",
    )
    precision: Literal["fp32", "bf16-mixed"] = Field(
        "fp32",
        description="fp32: everything fp32. bf16-mixed: fp32 weights and optimizer, the forward and "
        "backward under bf16 autocast (fast on GPUs; slow on most CPUs).",
    )
    activation_checkpointing: bool = Field(
        False,
        description="Recompute each decoder layer's activations in backward (less memory, ~1/3 more compute).",
    )
    lora: LoraSettings | None = Field(
        None,
        description="Train LoRA adapters (peft) on the model's linear projections, base weights "
        "frozen; engines and checkpoints get the merged weights (lora.py). None: full fine-tuning.",
    )

    @model_validator(mode="after")
    def _check(self) -> TrainerConfig:
        if self.schedule != "constant" and self.total_steps is None:
            raise ValueError(f"schedule {self.schedule!r} needs total_steps (updates the decay spans)")
        if self.kl_coef > 0 and self.data_parallel > 1:
            raise ValueError(
                "kl_coef needs data_parallel = 1: the reference copy of the model is not sharded"
            )
        if self.lora is not None and self.data_parallel > 1:
            raise ValueError("trainer.lora needs data_parallel = 1 (adapters are not sharded)")
        if self.lora is not None and self.deterministic:
            raise ValueError(
                "trainer.lora and trainer.deterministic do not combine: the invariant "
                "forward reads plain linear weights"
            )
        if not all(0.0 <= b < 1.0 for b in self.betas):
            raise ValueError(f"betas must lie in [0, 1); got {self.betas}")
        return self


class TrainerRunSettings(Config):
    """The trainer's slice of a run's settings: what a trainer handle hands to the trainer it runs.

    Every handle (a worker thread, a child process, data-parallel ranks, a Ray actor) takes this one
    object, so a setting the trainer needs reaches it whatever runs it; it crosses process
    boundaries as `model_dump()` and comes back with `model_validate`.
    """

    trainer: TrainerConfig = Field(default_factory=TrainerConfig, description="The `[trainer]` table.")
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="The run's bound, re-checked per sample at the optimizer (`Trainer.train_step`); "
        "None: no re-check.",
    )
    threads: int | None = Field(
        None, ge=1, description="torch intra-op threads of the trainer (None: torch's)."
    )
