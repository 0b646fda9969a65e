"""`TrainerHandle`: the pipeline's view of the trainer, wherever it runs.

`InProcessTrainer` wraps an `inhabit.trainer.Trainer` in this process and runs each step in a
worker thread, so the event loop (and every rollout) keeps going while torch trains. Pipeline
steps that skip the update (no sample with a non-zero advantage) still count as steps; the count
travels in the checkpoint's data state, so `--resume` continues at the right step.
"""

from __future__ import annotations

import abc
import asyncio
from pathlib import Path
from typing import Any


class TrainerHandle(abc.ABC):
    version: int
    steps: int

    @abc.abstractmethod
    async def step(self, samples: list[Any]) -> dict[str, Any]:
        """One policy update; returns the trainer's step metrics as a dict."""

    async def skip(self) -> None:
        """A pipeline step without an update."""
        self.steps += 1

    @abc.abstractmethod
    def state_dict_for_engine(self) -> dict[str, Any]: ...

    @abc.abstractmethod
    def set_data_state(self, state: dict[str, Any]) -> None: ...

    @abc.abstractmethod
    def save(self, path: Path) -> Path: ...

    async def close(self) -> None:  # noqa: B027 - optional
        """Free what the handle holds."""


class InProcessTrainer(TrainerHandle):
    """An `inhabit.trainer.Trainer` in this process (see module docstring)."""

    def __init__(self, trainer: Any, threads: int | None = None) -> None:
        self.trainer = trainer
        self.threads = threads
        self.steps = int(trainer.data_state.get("pipeline_steps", trainer.steps))

    @property
    def version(self) -> int:  # type: ignore[override]
        return int(self.trainer.version)

    async def step(self, samples: list[Any]) -> dict[str, Any]:
        metrics = await asyncio.to_thread(self._step, samples)
        self.steps += 1
        return metrics.as_dict()

    def _step(self, samples: list[Any]) -> Any:
        # torch's (OpenMP) thread count is per OS thread: set it in the worker thread itself.
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)
        return self.trainer.train_step(samples)

    def state_dict_for_engine(self) -> dict[str, Any]:
        return self.trainer.state_dict_for_engine()

    def set_data_state(self, state: dict[str, Any]) -> None:
        self.trainer.data_state = {**state, "pipeline_steps": self.steps}

    def save(self, path: Path) -> Path:
        return self.trainer.save(path)
