"""`DistributedTrainer`: the data-parallel trainer's handle (`[trainer] data_parallel = N`).

The run's process is rank 0: it holds the `TrainerHandle`, and before each command it broadcasts
the command (with its samples) to the other ranks, which follow (`follow`), so that every rank
takes part in each step's collectives (inhabit.trainer.distributed says what they are).

Two ways to get the ranks:

* inhabit starts them: `inhabit train run.toml trainer.data_parallel=2` spawns N-1 processes
  that meet rank 0 on a loopback TCP port (`torch.multiprocessing` spawn context);
* `torchrun`: `torchrun --nproc-per-node 2 -m inhabit train run.toml trainer.data_parallel=2`
  (the ranks read RANK, WORLD_SIZE, MASTER_ADDR/PORT from the environment); rank 0 runs the
  whole run, the other ranks' `inhabit train` only follows (cli.py calls `follow`).

Backend: NCCL when `trainer.device` is CUDA (each rank on cuda:LOCAL_RANK), gloo otherwise.
Every rank reads the starting model and checkpoints from the same path (one machine, or storage
all nodes see). A rank that fails leaves the others waiting in a collective until the group's
timeout (`TIMEOUT`); the run's process reports the error.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inhabit.errors import OrchestratorError
from inhabit.log import get_logger
from inhabit.placement.trainer_local import InProcessTrainer
from inhabit.trainer.config import TrainerRunSettings

if TYPE_CHECKING:
    from inhabit.trainer.metrics import StepMetrics
    from inhabit.trainer.samples import Sample

log = get_logger(__name__)

TIMEOUT = datetime.timedelta(minutes=30)


def under_torchrun() -> bool:
    """Whether this process is one rank of a `torchrun` launch of more than one."""
    return "TORCHELASTIC_RUN_ID" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1


def _backend(device: str) -> str:
    return "nccl" if device.startswith("cuda") else "gloo"


def _init(rank: int, world_size: int, device: str, init_method: str) -> None:
    import torch
    import torch.distributed as dist

    if device.startswith("cuda"):
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group(
        _backend(device), init_method=init_method, rank=rank, world_size=world_size, timeout=TIMEOUT
    )


def _build(start: str, config: dict[str, Any], checkpoint: str | None) -> Any:
    from inhabit.trainer.config import TrainerConfig
    from inhabit.trainer.trainer import Trainer

    trainer = Trainer.from_pretrained(checkpoint or start, TrainerConfig.model_validate(config))
    if checkpoint:
        trainer.load(checkpoint)
    return trainer


def follow(threads: int | None = None) -> None:
    """A rank other than 0: build the trainer rank 0 describes, then run its commands until `close`."""
    import torch
    import torch.distributed as dist

    from inhabit.trainer import distributed

    if threads:
        torch.set_num_threads(threads)
    # Every rank computes the whole batch's metrics; rank 0 logs them (no copy per rank).
    logging.getLogger("inhabit.trainer.trainer").setLevel(logging.WARNING)
    dp = distributed.current()
    assert dp is not None and dp.rank != 0, "follow() runs on ranks 1..N-1 of a process group"
    cmd, arg = dp.broadcast()
    assert cmd == "init", cmd
    trainer = _build(**arg)
    try:
        while True:
            cmd, arg = dp.broadcast()
            if cmd == "close":
                return
            try:
                if cmd == "step":
                    trainer.train_step(arg[0], max_staleness=arg[1])
                elif cmd == "state":
                    trainer.state_dict_for_engine()
                elif cmd == "save":
                    trainer.save(arg)
            except Exception as e:  # rank 0 meets the same error (the same inputs) and reports it
                log.warning("rank %d: %s failed: %s: %s", dp.rank, cmd, type(e).__name__, e)
    finally:
        dist.destroy_process_group()
        distributed.reset()


def follow_torchrun(cfg: Any) -> bool:
    """Under torchrun on a rank other than 0: join the group, follow rank 0 until it closes, and
    return True (the caller does nothing else). False anywhere else."""
    if not under_torchrun() or int(os.environ.get("RANK", "0")) == 0:
        return False
    n = int(os.environ["WORLD_SIZE"])
    if cfg.trainer.data_parallel != n:
        raise OrchestratorError(
            f"torchrun started {n} ranks but trainer.data_parallel = {cfg.trainer.data_parallel}: make them equal"
        )
    _init(int(os.environ["RANK"]), n, cfg.trainer.device, "env://")
    follow(cfg.trainer.num_threads or cfg.threads)
    return True


def _spawned(rank: int, world_size: int, port: int, device: str, threads: int | None) -> None:
    _init(rank, world_size, device, f"tcp://127.0.0.1:{port}")
    follow(threads)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DistributedTrainer(InProcessTrainer):
    """Rank 0 of a data-parallel trainer, in the run's process (module docstring)."""

    def __init__(
        self,
        start: str | Path,
        settings: TrainerRunSettings,
        *,
        checkpoint: str | Path | None = None,
    ) -> None:
        import torch.distributed as dist
        import torch.multiprocessing as mp

        from inhabit.trainer import distributed

        config, threads = settings.trainer, settings.threads
        n = config.data_parallel
        self._procs: list[Any] = []
        if dist.is_initialized():
            raise OrchestratorError(
                "a process group is already up in this process: one DistributedTrainer at a time"
            )
        if under_torchrun():
            if int(os.environ["WORLD_SIZE"]) != n or int(os.environ["RANK"]) != 0:
                raise OrchestratorError(
                    f"torchrun started {os.environ['WORLD_SIZE']} ranks but trainer.data_parallel = {n}: "
                    "make them equal (torchrun --nproc-per-node N ... trainer.data_parallel=N)"
                )
            _init(0, n, config.device, "env://")
        else:
            port = _free_port()
            ctx = mp.get_context("spawn")
            for rank in range(1, n):
                p = ctx.Process(target=_spawned, args=(rank, n, port, config.device, threads), daemon=True)
                p.start()
                self._procs.append(p)
            _init(0, n, config.device, f"tcp://127.0.0.1:{port}")
        self.dp = distributed.current()
        assert self.dp is not None
        arg = {
            "start": str(start),
            "config": config.model_dump(),
            "checkpoint": str(checkpoint) if checkpoint else None,
        }
        self.dp.broadcast(("init", arg))
        super().__init__(_build(**arg), settings)

    def _step(self, samples: Sequence[Sample]) -> StepMetrics:
        self.dp.broadcast(("step", (list(samples), self.settings.max_staleness)))
        return super()._step(samples)

    def state_dict_for_engine(self) -> dict[str, Any]:
        self.dp.broadcast(("state", None))
        return self.trainer.state_dict_for_engine()

    def save(self, path: Path) -> Path:
        self.dp.broadcast(("save", str(path)))
        return self.trainer.save(path)

    async def close(self) -> None:
        import asyncio

        await asyncio.to_thread(self.close_sync)

    def close_sync(self) -> None:
        """End the followers and the process group (idempotent)."""
        import torch.distributed as dist

        from inhabit.trainer import distributed

        if not dist.is_initialized():
            return
        self.dp.broadcast(("close", None))
        dist.destroy_process_group()
        distributed.reset()
        for p in self._procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
