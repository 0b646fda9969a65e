"""`inhabit train CONFIG --dry-run`: the resolved config and what the run would do, doing none of it.

The plan reads only the config and what already exists on disk (task directories counted, a model
folder's config.json): it builds no model, starts no engine, sandbox or Ray, and writes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from inhabit.orchestrator.config import RunConfig
from inhabit.placement.engine_backends import describe_engines


def _task_dirs(folder: str | None) -> str:
    if folder is None:
        return "none"
    root = Path(folder)
    if not root.is_dir():
        return f"{folder} (MISSING: no such folder)"
    return f"{len(list(root.glob('*/task.toml')))} task directories under {folder}"


def _model(cfg: RunConfig) -> str:
    m = cfg.model
    if m.path is not None:
        config = Path(m.path) / "config.json"
        if not config.is_file():
            return f"folder {m.path} (MISSING: no config.json there)"
        hf = json.loads(config.read_text())
        shape = f"{hf.get('num_hidden_layers', '?')} layers x {hf.get('hidden_size', '?')}"
        boot = f"; bootstrapped {m.bootstrap.steps} steps from it" if m.bootstraps else ""
        return f"folder {m.path}: {hf.get('model_type', '?')}, {shape}{boot}"
    from inhabit.models.tiny import count_spec_parameters, resolve_spec

    spec = resolve_spec(m.preset if m.preset is not None else m.spec)  # type: ignore[arg-type]
    counts = count_spec_parameters(spec)
    name = m.preset or f"{spec.arch} spec"
    boot = f"; bootstrap {m.bootstrap.steps} steps" if m.bootstrap.steps else ""
    return (
        f"tiny {name} from random init (seed {m.init_seed}): {spec.num_layers} layers x {spec.hidden_size}, "
        f"{counts.total / 1e6:.2f}M parameters ({counts.active / 1e6:.2f}M active per token){boot}"
    )


def _placement(cfg: RunConfig) -> str:
    p = cfg.placement
    if p.backend == "ray":
        r = p.ray
        where = r.address or "RAY_ADDRESS, else a fresh single-machine Ray"
        return f"ray ({where}): {r.engines} engine actor(s), {r.env_servers} env server(s), one trainer actor"
    trainer = "a thread of this process" if p.trainer == "thread" else "a child process"
    if cfg.trainer.data_parallel > 1:
        trainer = f"{cfg.trainer.data_parallel} data-parallel ranks ({cfg.trainer.precision}, this process is rank 0)"
    return f"local: engines and sandboxes on this machine, trainer in {trainer}"


def plan(cfg: RunConfig) -> list[tuple[str, str]]:
    """(what, value) rows describing the run `cfg` would make."""
    t, r = cfg.tasks, cfg.rollout
    if t.source != "dir":
        tasks = f"generated {t.source} family: {t.count - t.held_out} train + {t.held_out} held-out (seed {t.seed})"
    else:
        tasks = f"train: {_task_dirs(t.dir)}; held-out: {_task_dirs(t.held_out_dir)}"
    per_step = r.tasks_per_step * r.group_size
    mode = f"async mode (max_staleness {cfg.max_staleness})" if cfg.mode == "async" else "sync mode"
    rollouts = (
        f"{r.tasks_per_step} tasks x G={r.group_size} = {per_step} per step, {per_step * cfg.steps} in all"
    )
    evals = [name for name, on in (("before", cfg.eval.before), ("after", cfg.eval.after)) if on]
    return [
        ("tasks", tasks),
        ("model", _model(cfg)),
        ("steps", f"{cfg.steps} trainer steps, {mode}"),
        ("rollouts", f"{rollouts}; {r.concurrency} at once"),
        ("placement", _placement(cfg)),
        ("engines", describe_engines(cfg.engine)),
        ("weights", f"published to {cfg.weights.store}" if cfg.weights.store else "in memory"),
        ("sandbox", cfg.sandbox.backend),
        (
            "held-out eval",
            f"{' and '.join(evals)} training, {cfg.eval.samples} samples per task" if evals else "off",
        ),
        ("run folder", cfg.run_dir),
    ]


def render(cfg: RunConfig) -> str:
    """The text `--dry-run` prints: the resolved config as JSON, then the plan."""
    rows = plan(cfg)
    width = max(len(k) for k, _ in rows)
    lines = [
        "resolved config:",
        json.dumps(cfg.model_dump(mode="json"), indent=2),
        "",
        "plan (dry run: nothing done):",
    ]
    lines += [f"  {k.ljust(width)}  {v}" for k, v in rows]
    return "\n".join(lines)
