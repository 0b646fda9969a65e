"""The trainer on this machine: `InProcessTrainer` (a worker thread) and `ProcessTrainer` (a child
process), the two `TrainerHandle`s of `LocalPlacement` (`placement.trainer = "thread" | "process"`).

`InProcessTrainer` wraps an `inhabit.trainer.Trainer` in this process and runs each step in a
worker thread, so the event loop (and every rollout) keeps going while torch trains.

`ProcessTrainer` models disaggregated hardware on one machine: the rollout side (engine, harness,
sandboxes) and the trainer each get their own CPU cores (`os.sched_setaffinity`, `pin`) and torch
thread pools, so neither slows the other down by contention, and the async/sync comparison
measures scheduling, not core sharing. Samples go to the child over a pipe; each step returns the
step metrics and the new weights (a CPU state dict), which the pipeline publishes through its
`WeightSync`.

Both take the run's `TrainerRunSettings` (trainer config, `max_staleness`, threads), so the
trainer re-checks the staleness bound at the optimizer in either. `start_thread_trainer` and
`start_process_trainer` start them as `LOCAL_TRAINERS` (inhabit.placement.config) names them.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inhabit.contracts import TrainerHandle
from inhabit.errors import OrchestratorError
from inhabit.trainer.config import TrainerRunSettings

if TYPE_CHECKING:
    from inhabit.placement.config import PlacementConfig
    from inhabit.trainer.metrics import StepMetrics
    from inhabit.trainer.samples import Sample
    from inhabit.trainer.trainer import Trainer


class InProcessTrainer(TrainerHandle):
    """An `inhabit.trainer.Trainer` in this process, stepped in a worker thread (module docstring)."""

    def __init__(self, trainer: Trainer, settings: TrainerRunSettings) -> None:
        self.trainer = trainer
        self.settings = settings  # its max_staleness: the trainer re-checks the bound at the optimizer
        self.steps = int(trainer.data_state.get("pipeline_steps", trainer.steps))

    @property
    def version(self) -> int:  # type: ignore[override]
        return int(self.trainer.version)

    async def step(self, samples: Sequence[Sample]) -> dict[str, Any]:  # type: ignore[override]
        metrics = await asyncio.to_thread(self._step, samples)
        self.steps += 1
        return metrics.as_dict()

    def _step(self, samples: Sequence[Sample]) -> StepMetrics:
        # torch's (OpenMP) thread count is per OS thread: set it in the worker thread itself.
        if self.settings.threads:
            import torch

            torch.set_num_threads(self.settings.threads)
        return self.trainer.train_step(samples, max_staleness=self.settings.max_staleness)

    def state_dict_for_engine(self) -> dict[str, Any]:
        return self.trainer.state_dict_for_engine()

    def set_data_state(self, state: dict[str, Any]) -> None:
        self.trainer.data_state = {**state, "pipeline_steps": self.steps}

    def save(self, path: Path) -> Path:
        return self.trainer.save(path)


def pin(cpus: list[int] | None, threads: int | None) -> set[int]:
    """Pin this process to `cpus` and set torch's intra-op threads (None: leave as is).

    Returns the CPU set the process had, for `unpin`. Every thread is pinned, not only the caller:
    on Linux `sched_setaffinity(0)` moves the calling thread alone, so threads started earlier (the
    asyncio to_thread pool, its sandbox children) would keep running on every core.
    """
    before = os.sched_getaffinity(0)
    if cpus:
        _set_all_threads(set(cpus))
    if threads:
        import torch

        torch.set_num_threads(threads)
    return before


def unpin(cpus: set[int]) -> None:
    """Give every thread of this process the CPU set `cpus` again (what `pin` returned)."""
    _set_all_threads(cpus)


def _set_all_threads(cpus: set[int]) -> None:
    tasks = Path("/proc/self/task")
    tids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    for tid in tids:
        try:
            os.sched_setaffinity(tid, cpus)
        except (ProcessLookupError, PermissionError):  # a thread that ended meanwhile
            pass


def _child(
    conn: Any, start: str, settings_data: dict, checkpoint: str | None, cpus: list[int] | None
) -> None:
    settings = TrainerRunSettings.model_validate(settings_data)
    pin(cpus, settings.threads)
    from inhabit.trainer.trainer import Trainer

    trainer = Trainer.from_pretrained(start, settings.trainer)
    if checkpoint:
        trainer.load(checkpoint)
    conn.send(("ready", trainer.version, trainer.data_state))
    while True:
        cmd, arg = conn.recv()
        try:
            if cmd == "step":
                m = trainer.train_step(arg, max_staleness=settings.max_staleness)
                conn.send(("ok", m.as_dict(), trainer.state_dict_for_engine()))
            elif cmd == "data_state":
                trainer.data_state = arg
                conn.send(("ok", None, None))
            elif cmd == "save":
                conn.send(("ok", str(trainer.save(arg)), None))
            elif cmd == "close":
                conn.send(("ok", None, None))
                return
        except Exception as e:  # report, keep serving: the parent decides
            conn.send(("error", f"{type(e).__name__}: {e}", None))


class ProcessTrainer(TrainerHandle):
    """Runs `inhabit.trainer.Trainer` in a spawned child process (see module docstring)."""

    def __init__(
        self,
        start: str | Path,
        settings: TrainerRunSettings,
        *,
        checkpoint: str | Path | None = None,
        cpus: list[int] | None = None,
    ) -> None:
        ctx = mp.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(
            target=_child,
            args=(
                child,
                str(start),
                settings.model_dump(),
                str(checkpoint) if checkpoint else None,
                cpus,
            ),
            daemon=True,
        )
        self._proc.start()
        tag, self.version, data_state = self._conn.recv()
        assert tag == "ready"
        self.steps = int(data_state.get("pipeline_steps", 0))
        self._state: dict[str, Any] = {}

    def _call(self, cmd: str, arg: Any = None) -> tuple[Any, Any]:
        self._conn.send((cmd, arg))
        tag, a, b = self._conn.recv()
        if tag == "error":
            raise OrchestratorError(f"trainer process failed on {cmd}: {a}")
        return a, b

    async def step(self, samples: Sequence[Sample]) -> dict[str, Any]:  # type: ignore[override]
        metrics, state = await asyncio.to_thread(self._call, "step", list(samples))
        self._state = state
        self.version = int(metrics["version"])
        self.steps += 1
        return metrics

    def state_dict_for_engine(self) -> dict[str, Any]:
        return self._state

    def set_data_state(self, state: dict[str, Any]) -> None:
        self._call("data_state", {**state, "pipeline_steps": self.steps})

    def save(self, path: Path) -> Path:
        return Path(self._call("save", str(path))[0])

    async def close(self) -> None:
        if self._proc.is_alive():
            try:
                await asyncio.to_thread(self._call, "close")
            except (EOFError, OSError):
                pass
            self._proc.join(timeout=10)
        if self._proc.is_alive():
            self._proc.terminate()


@dataclass
class LocalTrainer:
    """A trainer started on this machine, as `LocalPlacement` keeps it."""

    handle: TrainerHandle
    data_state: dict[str, Any]
    """The trainer's checkpointed data state (empty on a fresh start)."""
    cpus_before: set[int] | None = None
    """This process's CPU set before the trainer pinned it elsewhere, for `unpin` (None: not pinned)."""


@dataclass(frozen=True)
class TrainerStart:
    """What a `LOCAL_TRAINERS` entry is given: the starting model (or a checkpoint to resume) and
    the settings of the trainer and of where it runs."""

    model_dir: Path
    settings: TrainerRunSettings
    checkpoint: Path | None
    placement: PlacementConfig
    threads: int | None
    """torch threads of this process (the run's `threads`)."""


StartLocalTrainer = Callable[[TrainerStart], LocalTrainer]


def start_thread_trainer(start: TrainerStart) -> LocalTrainer:
    """`placement.trainer = "thread"`: an `InProcessTrainer`."""
    from inhabit.trainer.trainer import Trainer

    trainer = Trainer.from_pretrained(start.checkpoint or start.model_dir, start.settings.trainer)
    if start.checkpoint is not None:
        trainer.load(start.checkpoint)
    return LocalTrainer(InProcessTrainer(trainer, start.settings), trainer.data_state)


def start_process_trainer(start: TrainerStart) -> LocalTrainer:
    """`placement.trainer = "process"`: a `ProcessTrainer` on `trainer_cpus` with `trainer_threads`,
    and this process pinned to `rollout_cpus` with `threads`."""
    pl, checkpoint = start.placement, start.checkpoint
    settings = start.settings.model_copy(update={"threads": pl.trainer_threads})
    handle = ProcessTrainer(start.model_dir, settings, checkpoint=checkpoint, cpus=pl.trainer_cpus)
    cpus_before = pin(pl.rollout_cpus, start.threads)
    data_state: dict[str, Any] = {}
    if checkpoint is not None:
        data_state = json.loads((checkpoint / "trainer_state.json").read_text()).get("data_state", {})
    return LocalTrainer(handle, data_state, cpus_before)
