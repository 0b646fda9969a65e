"""`LocalPlacement`: every part of a run on this machine (`placement.backend = "local"`).

    engine     one `EmbeddedEngine` in this process, on the trainer's weights and version; or, with
               `[engine] backend`/`replicas`, several engines or `vllm serve` subprocesses or remote
               servers behind a `ReplicaSet` (inhabit.placement.engine_backends)
    sandboxes  the run's sandbox provider (`[sandbox]`: bwrap or process)
    trainer    `InProcessTrainer` (a worker thread, `placement.trainer = "thread"`),
               `ProcessTrainer` (a child process on its own cores, `placement.trainer = "process"`) or,
               with `trainer.data_parallel = N > 1`, `DistributedTrainer` (this process is rank 0 of
               N trainer ranks; trainer_dist.py)
    weights    `InProcessWeightSync`: the new state dict handed to the engine(s) in memory (also
               published to `[weights] store` when set: `PublishingWeightSync`)
    rollouts   `EngineRunner` (inhabit.rollouts): G episodes per group against the one engine

A trainer here never goes missing the way an actor on another machine does, so a run on this
placement is never restarted (`max_trainer_restarts = 0`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inhabit.contracts import RunParts, TrainerHandle
from inhabit.placement.config import RunSettings
from inhabit.rollouts import EngineRunner, TrajectoryLog, reward_composer
from inhabit.sandbox.base import SandboxProvider


class LocalPlacement:
    """The `Placement` of a run on this machine (see module docstring)."""

    max_trainer_restarts = 0

    def __init__(self, cfg: RunSettings) -> None:
        self.cfg = cfg
        self._cpus_before: set[int] | None = None

    def start(self) -> None:
        """Nothing to join."""

    async def setup(
        self, model_dir: Path, checkpoint: Path | None, provider: SandboxProvider, log_file: TrajectoryLog
    ) -> RunParts:
        from inhabit.models.loading import load_tokenizer
        from inhabit.placement.engine_backends import start_engines
        from inhabit.placement.weight_sync import InProcessWeightSync, PublishingWeightSync

        cfg = self.cfg
        trainer, data_state = self._trainer(model_dir, checkpoint)
        try:
            engine = await start_engines(
                cfg.engine,
                checkpoint or model_dir,
                version=trainer.version,
                log_dir=Path(cfg.run_dir) / "engines",
            )
        except BaseException:
            await trainer.close()
            raise
        tokenizer = getattr(engine, "tokenizer", None) or load_tokenizer(checkpoint or model_dir)
        runner = EngineRunner(
            engine, tokenizer, provider,
            harness=cfg.harness, rollout=cfg.rollout, log_file=log_file, seed=cfg.seed,
            composer=reward_composer(cfg.reward),
        )  # fmt: skip
        sync = PublishingWeightSync(cfg.weights.store) if cfg.weights.store else InProcessWeightSync()
        return RunParts(trainer=trainer, data_state=data_state, engine=engine, runner=runner, sync=sync)

    def _trainer(self, model_dir: Path, checkpoint: Path | None) -> tuple[TrainerHandle, dict[str, Any]]:
        from inhabit.placement.config import LOCAL_TRAINERS
        from inhabit.trainer.config import TrainerRunSettings

        cfg, pl = self.cfg, self.cfg.placement
        settings = TrainerRunSettings(
            trainer=cfg.trainer,
            max_staleness=cfg.max_staleness,
            threads=cfg.trainer.num_threads or cfg.threads,
        )
        if cfg.trainer.data_parallel > 1:  # this process is rank 0 (placement.trainer does not apply)
            from inhabit.placement.trainer_dist import DistributedTrainer

            handle = DistributedTrainer(model_dir, settings, checkpoint=checkpoint)
            return handle, handle.trainer.data_state
        from inhabit.placement.trainer_local import TrainerStart

        start = TrainerStart(model_dir, settings, checkpoint, placement=pl, threads=cfg.threads)
        started = LOCAL_TRAINERS.load(pl.trainer)(start)
        # The caller gets its CPU set back when the run ends (a second run in this process, as in
        # bench/pipeline.py, would otherwise find only the rollout cores and pin its trainer there).
        self._cpus_before = started.cpus_before
        return started.handle, started.data_state

    def metrics(self, parts: RunParts) -> dict[str, Any] | None:
        """Engine replicas and reruns when there are several engines (nothing to say for one)."""
        stats = getattr(parts.engine, "stats", None)
        if stats is None:
            return None
        return {**stats(), "reruns": getattr(parts.runner, "reruns", 0)}

    async def end_attempt(self, parts: RunParts) -> None:
        from inhabit.placement.trainer_local import unpin

        try:
            await parts.close()
        finally:
            if self._cpus_before is not None:
                unpin(self._cpus_before)
                self._cpus_before = None

    def shutdown(self) -> None:
        """Nothing outlives the attempt."""
