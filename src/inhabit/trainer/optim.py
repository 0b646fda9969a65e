"""AdamW and the learning-rate schedule (linear warm-up, then constant, linear or cosine decay).

The schedule is a pure function of the update count, so a scheduler rebuilt from the config and
given its saved state (`LambdaLR.state_dict`, which holds the count) continues exactly.
"""

from __future__ import annotations

import math

import torch

from inhabit.trainer.config import TrainerConfig


def lr_factor(update: int, config: TrainerConfig) -> float:
    """Multiplier of `config.lr` for the optimizer update number `update` (0-based)."""
    if config.warmup_steps and update < config.warmup_steps:
        return (update + 1) / config.warmup_steps
    if config.schedule == "constant" or config.total_steps is None:
        return 1.0
    span = max(config.total_steps - config.warmup_steps, 1)
    progress = min(max(update - config.warmup_steps, 0) / span, 1.0)
    floor = config.min_lr_ratio
    if config.schedule == "linear":
        return floor + (1.0 - floor) * (1.0 - progress)
    return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def build_optimizer(
    model: torch.nn.Module, config: TrainerConfig
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters (tied weights once) and its LambdaLR scheduler."""
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        params,
        lr=config.lr,
        betas=config.betas,
        eps=config.adam_eps,
        weight_decay=config.weight_decay,
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda u: lr_factor(u, config))
    return optimizer, scheduler
