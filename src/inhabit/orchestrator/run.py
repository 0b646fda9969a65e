"""`train(cfg, resume=...)`: one whole run, what `inhabit train CONFIG` calls.

1. prepare tasks and the starting model (prepare.py; cached under `<run_dir>/cache`);
2. pick the placement (`[placement]`: `LocalPlacement` on this machine, `RayPlacement` across a
   Ray cluster) and have it start the run's parts (`RunParts`): the trainer (from the starting
   model, or the newest checkpoint with `resume`), the engine(s) on the same weights and
   version, the weight sync and the rollout runner with its sandboxes;
3. evaluate the held-out tasks (unless resuming a run that already did);
4. run the pipeline for `steps` trainer steps (checkpoints every `checkpoint_every` and at the end);
5. evaluate again and write `summary.json`.

Every placement runs this one path. One rollout, from `inhabit train` to the optimizer:

    inhabit train CONFIG -> train() -> _run(): prepare(), placement.setup() -> RunParts
      Pipeline.run()
        producer: task = GroupBuffer.pop_requeued() or TaskStream.next()
                  WeightSync.apply(engine)                       newest weights into the engine(s)
                  RolloutRunner.run_group(task) -> Group         G episodes: harness + sandbox +
                        |                                        engine + grading -> Trajectory x G
                        v                                        (and a line in trajectories.jsonl)
                  GroupBuffer.put(group)
        trainer:  GroupBuffer.take(tasks_per_step, version)      stale groups dropped, requeued
                  usable_groups() -> group_samples()             the group rule, advantages
                  TrainerHandle.step(samples)                    the optimizer (thread, child
                        |                                        process or Ray actor)
                        v
                  WeightSync.publish(state, version) -> apply(engine)
                  on_step(): metrics.jsonl, display, checkpoints

A trainer that dies (`TrainerLost`, only a Ray actor can) ends the attempt; the run sets its
parts up again from the newest checkpoint, at most `placement.max_trainer_restarts` times.

Stopping early: create a file named `STOP` in the run folder (`touch runs/x/STOP`). The run
finishes the step in progress, checkpoints, skips the final evaluation, writes `summary.json`
with `"stopped": true` and exits; `--resume` continues from there. The file is consumed (removed)
when the run stops, and a stale one is removed when a run starts.

Run folder: `trajectories.jsonl` (every rollout, train and eval), `metrics.jsonl` (one record
per step, plus eval records), `tensorboard/`, `checkpoints/vNNNNNN/`, `eval.json`, `summary.json`.
A fresh (not resumed) run clears these outputs of an earlier run in the same folder, keeping
`cache/`.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import time
from pathlib import Path
from typing import Any

from inhabit.contracts import Placement, RunParts, TrainerLost
from inhabit.errors import OrchestratorError
from inhabit.log import get_logger
from inhabit.observability.metrics import MetricsWriter
from inhabit.observability.progress import RunDisplay
from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.prepare import Prepared
from inhabit.rollouts import TrajectoryLog
from inhabit.sandbox.base import SandboxProvider

log = get_logger(__name__)

STOP_FILE = "STOP"
OUTPUTS = ("trajectories.jsonl", "metrics.jsonl", "tensorboard", "checkpoints", "eval.json", "summary.json")


def _clear_outputs(run_dir: Path) -> None:
    for name in OUTPUTS:
        p = run_dir / name
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def make_placement(cfg: RunConfig) -> Placement:
    """The placement `[placement] backend` names (one of `inhabit.placement.config.PLACEMENTS`)."""
    from inhabit.placement.config import PLACEMENTS

    return PLACEMENTS.load(cfg.placement.backend)(cfg)


def train(
    cfg: RunConfig,
    *,
    resume: bool = False,
    display: RunDisplay | None = None,
    placement: Placement | None = None,
) -> dict[str, Any]:
    """Run `cfg` (see module docstring). `placement`: one made by `make_placement(cfg)` (the
    default), passed in by a caller that wants to watch its parts while the run goes on."""
    from inhabit.placement.engine_backends import check_backend

    check_backend(cfg.engine)  # a missing vLLM install is one line before any work, not after it
    placement = placement or make_placement(cfg)
    display = display or RunDisplay(cfg.metrics.progress, cfg.steps)
    with display:
        return asyncio.run(_run(cfg, resume, display, placement))


async def _run(cfg: RunConfig, resume: bool, display: RunDisplay, placement: Placement) -> dict[str, Any]:
    import torch
    import transformers

    from inhabit.orchestrator.prepare import prepare
    from inhabit.sandbox import create_provider
    from inhabit.trainer.checkpoint import latest_checkpoint

    transformers.utils.logging.disable_progress_bar()  # our own display reports progress
    t_start = time.monotonic()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    ckpt_root = run_dir / "checkpoints"
    ckpt = latest_checkpoint(ckpt_root) if resume else None
    if resume and ckpt is None:
        raise OrchestratorError(f"--resume: no checkpoint under {ckpt_root}; run without --resume to start")
    if not resume:
        _clear_outputs(run_dir)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    stop_file = run_dir / STOP_FILE
    if stop_file.exists():  # left from before this run started: not a request to this run
        log.warning("removing %s left from an earlier run", stop_file)
        stop_file.unlink()
    placement.start()
    try:
        provider = create_provider(cfg.sandbox)
        prepared = await asyncio.to_thread(prepare, cfg, provider, display.say)
        if not prepared.train:
            raise OrchestratorError("no train tasks: check [tasks]")
        restarts = 0
        while True:
            try:
                summary = await _attempt(cfg, display, placement, provider, prepared, ckpt, t_start)
            except TrainerLost as e:
                if restarts >= placement.max_trainer_restarts:
                    raise OrchestratorError(
                        f"{e}; gave up after {restarts} restarts "
                        "(placement.ray.max_trainer_restarts); `inhabit train --resume` continues"
                    ) from e
                restarts += 1
                ckpt = latest_checkpoint(ckpt_root)
                if ckpt is None:  # nothing to resume from: start over, as a fresh run would
                    _clear_outputs(run_dir)
                display.say(f"{e}: resuming from {ckpt or 'the start (no checkpoint yet)'}")
                continue
            summary["trainer_restarts"] = restarts
            return summary
    finally:
        placement.shutdown()


async def _attempt(
    cfg: RunConfig,
    display: RunDisplay,
    placement: Placement,
    provider: SandboxProvider,
    prepared: Prepared,
    ckpt: Path | None,
    t_start: float,
) -> dict[str, Any]:
    """One attempt: the placement's parts, evaluation, the pipeline, the final evaluation."""
    traj_log = TrajectoryLog(Path(cfg.run_dir) / "trajectories.jsonl")
    try:
        parts = await placement.setup(prepared.model_dir, ckpt, provider, traj_log)
        try:
            if ckpt is not None:
                display.say(f"resuming from {ckpt} (version {parts.trainer.version})")
            return await _drive(cfg, display, placement, parts, prepared, traj_log, t_start)
        finally:
            await placement.end_attempt(parts)
    finally:
        traj_log.close()


async def _drive(
    cfg: RunConfig,
    display: RunDisplay,
    placement: Placement,
    parts: RunParts,
    prepared: Prepared,
    traj_log: TrajectoryLog,
    t_start: float,
) -> dict[str, Any]:
    from inhabit.orchestrator.evaluate import evaluate
    from inhabit.orchestrator.pipeline import Pipeline
    from inhabit.trainer.checkpoint import checkpoint_name

    run_dir = Path(cfg.run_dir)
    ckpt_root = run_dir / "checkpoints"
    stop_file = run_dir / STOP_FILE
    handle, runner, engine = parts.trainer, parts.runner, parts.engine
    writer = MetricsWriter(
        run_dir, tensorboard=cfg.metrics.tensorboard, wandb=cfg.metrics.wandb,
        wandb_project=cfg.metrics.wandb_project, config=cfg.model_dump(),
    )  # fmt: skip
    eval_path = run_dir / "eval.json"
    evals: dict[str, Any] = json.loads(eval_path.read_text()) if eval_path.exists() else {}
    held = prepared.held_out[: cfg.eval.max_tasks] if cfg.eval.max_tasks else prepared.held_out
    summary: dict[str, Any] = {"run_dir": str(run_dir), "mode": cfg.mode, "prepare": prepared.info}
    try:
        if cfg.eval.before and held and "before" not in evals:
            display.say(
                f"evaluating the starting model: {len(held)} held-out tasks x {cfg.eval.samples} samples"
            )
            evals["before"] = await evaluate(runner, held, cfg.eval.samples, "before")
            eval_path.write_text(json.dumps(evals, indent=2))
            writer.log(handle.steps, {"eval": {"before": evals["before"]}})
            display.say(f"held-out success before RL: {evals['before']['success_rate']:.1%}")

        def on_step(step: int, record: dict[str, Any]) -> None:
            if (dispatch := placement.metrics(parts)) is not None:
                record["dispatch"] = dispatch
            writer.log(step, record)
            display.step(step, record)
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps:
                handle.save(ckpt_root / checkpoint_name(handle.version))

        ds = parts.data_state
        pipe = Pipeline(
            cfg, runner, handle, parts.sync, prepared.train, on_step=on_step,
            cursor=int(ds.get("cursor", 0)), groups_started=int(ds.get("groups_started", 0)),
            should_stop=stop_file.exists,
        )  # fmt: skip
        t_rl = time.monotonic()
        if handle.steps < cfg.steps:
            display.say(
                f"RL ({cfg.mode}): {cfg.steps - handle.steps} steps, max_staleness {cfg.max_staleness}"
            )
            display.start_steps(handle.steps)
            await pipe.run(cfg.steps)
            display.stop_steps()
            handle.set_data_state(pipe.data_state())
            handle.save(ckpt_root / checkpoint_name(handle.version))
        summary["rl_s"] = round(time.monotonic() - t_rl, 2)
        stopped = handle.steps < cfg.steps
        if stopped:
            stop_file.unlink(missing_ok=True)
            summary["stopped"] = True
            display.say(
                f"stopped on request ({stop_file}) after step {handle.steps} of {cfg.steps}; "
                "continue with --resume"
            )
        if cfg.eval.after and held and not stopped:
            display.say(f"evaluating the trained model (version {engine.version})")
            evals["after"] = await evaluate(runner, held, cfg.eval.samples, "after")
            eval_path.write_text(json.dumps(evals, indent=2))
            writer.log(handle.steps, {"eval": {"after": evals["after"]}})
        summary |= {
            "steps": handle.steps,
            "version": handle.version,
            "eval": evals,
            "dropped_stale": pipe.buffer.dropped_stale,
            "trajectories": traj_log.written,
            "wall_s": round(time.monotonic() - t_start, 2),
            "history": pipe.history,
        }
        (run_dir / "summary.json").write_text(
            json.dumps({k: v for k, v in summary.items() if k != "history"}, indent=2)
        )
        return summary
    finally:
        writer.close()
