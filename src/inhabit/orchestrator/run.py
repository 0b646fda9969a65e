"""`train(cfg, resume=...)`: one whole run, what `inhabit train CONFIG` calls.

1. prepare tasks and the starting model (prepare.py; cached under `<run_dir>/cache`);
2. start the trainer (from the starting model, or the newest checkpoint with `resume`) and an
   embedded engine on the same weights and version;
3. evaluate the held-out tasks (unless resuming a run that already did);
4. run the pipeline for `steps` trainer steps (checkpoints every `checkpoint_every` and at the end);
5. evaluate again and write `summary.json`.

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

from inhabit.errors import OrchestratorError
from inhabit.log import get_logger
from inhabit.observability.metrics import MetricsWriter
from inhabit.observability.progress import RunDisplay
from inhabit.orchestrator.config import RunConfig

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


def train(cfg: RunConfig, *, resume: bool = False, display: RunDisplay | None = None) -> dict[str, Any]:
    display = display or RunDisplay(cfg.metrics.progress, cfg.steps)
    with display:
        if cfg.placement.backend == "ray":
            from inhabit.placement.cluster import train_on_ray

            return asyncio.run(train_on_ray(cfg, resume, display, _train))
        return asyncio.run(_train(cfg, resume, display))


async def _train(cfg: RunConfig, resume: bool, display: RunDisplay, placement: Any = None) -> dict[str, Any]:
    import torch
    import transformers

    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.orchestrator.evaluate import evaluate
    from inhabit.orchestrator.pipeline import Pipeline
    from inhabit.orchestrator.prepare import prepare
    from inhabit.orchestrator.rollouts import RolloutRunner, TrajectoryLog
    from inhabit.orchestrator.trainer_handle import InProcessTrainer, TrainerHandle
    from inhabit.orchestrator.weight_sync import InProcessWeightSync
    from inhabit.sandbox import create_provider
    from inhabit.trainer.checkpoint import checkpoint_name, latest_checkpoint
    from inhabit.trainer.trainer import Trainer

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
    provider = create_provider(cfg.sandbox)
    prepared = await asyncio.to_thread(prepare, cfg, provider, display.say)
    if not prepared.train:
        raise OrchestratorError("no train tasks: check [tasks]")

    start = ckpt or prepared.model_dir
    pl = cfg.placement
    cpus_before: set[int] | None = None
    handle: TrainerHandle
    if placement is not None:  # Ray actors (inhabit.placement): trainer, engines, env servers
        handle, data_state, engine, make_runner, sync = await placement.setup(prepared.model_dir, ckpt)
    elif pl.trainer == "process":
        from inhabit.orchestrator.trainer_process import ProcessTrainer, pin

        handle = ProcessTrainer(
            prepared.model_dir, cfg.trainer, checkpoint=ckpt, cpus=pl.trainer_cpus, threads=pl.trainer_threads
        )
        # The caller gets its CPU set back when the run ends (a second run in this process, as in
        # bench/pipeline.py, would otherwise find only the rollout cores and pin its trainer there).
        cpus_before = pin(pl.rollout_cpus, cfg.threads)
        data_state: dict[str, Any] = {}
        if ckpt is not None:
            data_state = json.loads((ckpt / "trainer_state.json").read_text()).get("data_state", {})
    else:
        trainer = Trainer.from_pretrained(start, cfg.trainer)
        if ckpt is not None:
            trainer.load(ckpt)
        handle = InProcessTrainer(
            trainer, threads=cfg.trainer.num_threads or cfg.threads, max_staleness=cfg.max_staleness
        )
        data_state = trainer.data_state
    if ckpt is not None:
        display.say(f"resuming from {ckpt} (version {handle.version})")
    if placement is None:
        engine = EmbeddedEngine.from_path(start, cfg.engine, version=handle.version)
        make_runner, sync = RolloutRunner, InProcessWeightSync()
    writer = MetricsWriter(
        run_dir, tensorboard=cfg.metrics.tensorboard, wandb=cfg.metrics.wandb,
        wandb_project=cfg.metrics.wandb_project, config=cfg.model_dump(),
    )  # fmt: skip
    traj_log = TrajectoryLog(run_dir / "trajectories.jsonl")
    runner = make_runner(
        engine,
        engine.tokenizer,
        provider,
        harness=cfg.harness,
        rollout=cfg.rollout,
        log_file=traj_log,
        seed=cfg.seed,
    )
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
            if placement is not None:
                record["dispatch"] = placement.metrics(runner)
            writer.log(step, record)
            display.step(step, record)
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0 and step < cfg.steps:
                handle.save(ckpt_root / checkpoint_name(handle.version))

        ds = data_state
        pipe = Pipeline(
            cfg, runner, handle, sync, prepared.train, on_step=on_step,
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
        traj_log.close()
        await engine.close()
        await handle.close()
        if cpus_before is not None:
            from inhabit.orchestrator.trainer_process import unpin

            unpin(cpus_before)
