"""`calibrate(run_dir)`: a `ScaleConfig` for the run that `inhabit train` wrote in `run_dir`,
with the simulated parts fitted to what that run recorded (`inhabit scale calibrate RUN_DIR`).

From trajectories.jsonl (train rollouts only):
    episode.turns, completion_tokens, prompt_tokens   the recorded values (empirical draws)
    episode.exec_s                                    each tool call's duration
    episode.grade_s                                   each rollout's grading time
    episode.create_s                                  rollout time not spent in turns, tools or grading
    episode.reward_p                                  share of rollouts with reward >= 1
    engine.step_s, per_seq_s                          the turns' seconds per generated token at the
                                                      run's mean decode batch, split between the fixed
                                                      and per-sequence parts in the proportion
                                                      bench/inference.py measured (23 ms + 2 ms/row)
From metrics.jsonl: trainer.step_s, per_token_s (least squares of train_s on the step's tokens),
and the run's own figures (`measured`: trajectories/min and trainer idle share at its last step).
From config.json: the run's shape (G, tasks per step, concurrency, staleness, steps, and the
number of engines: `engine.replicas` of a local embedded or vLLM backend, else one).
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

from inhabit.errors import ConfigError
from inhabit.orchestrator.scale.config import Dist, ScaleConfig

# bench/inference.py (dense-5m, one thread): 1 request 40 tok/s, 64 requests 423 tok/s, i.e. a
# decode step of ~23 ms plus ~2 ms per row.
_ROW_SHARE = 0.002 / 0.023


def _empirical(values: list[float], fallback: Dist) -> Dist:
    vals = [round(v, 6) for v in values if v > 0]
    return Dist(kind="empirical", values=vals) if vals else fallback


def _fit_line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) by least squares, both clamped at >= 0."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return 0.0, (sum(ys) / max(1e-9, sum(xs)))
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    slope = max(0.0, slope)
    return max(0.0, my - slope * mx), slope


def calibrate(run_dir: str | Path) -> tuple[ScaleConfig, dict[str, Any]]:
    """(the scenario of the run, what the run measured); see the module docstring."""
    run = Path(run_dir)
    trajs_path, metrics_path = run / "trajectories.jsonl", run / "metrics.jsonl"
    if not trajs_path.is_file() or not metrics_path.is_file():
        raise ConfigError(
            f"{run} has no trajectories.jsonl and metrics.jsonl: give the folder of a finished `inhabit train` run"
        )
    trajs = [json.loads(line) for line in trajs_path.open()]
    trajs = [t for t in trajs if t.get("metadata", {}).get("purpose", "train") == "train"]
    steps = [m for m in map(json.loads, metrics_path.open()) if "version" in m and "trainer" in m]
    if not trajs or not steps:
        raise ConfigError(f"{run} recorded no train rollouts or no trainer step")
    turns = [t for tr in trajs for s in tr["segments"] for t in s["turns"]]
    episode = {
        "turns": _empirical(
            [float(sum(len(s["turns"]) for s in tr["segments"])) for tr in trajs],
            Dist(kind="fixed", median=1),
        ),
        "completion_tokens": _empirical(
            [float(t.get("completion_tokens") or 0) for t in turns], Dist(kind="fixed", median=32)
        ),
        "prompt_tokens": _empirical(
            [float(t.get("prompt_tokens") or 0) for t in turns], Dist(kind="fixed", median=64)
        ),
        "exec_s": _empirical(
            [c.get("duration_s", 0.0) for tr in trajs for c in tr["tool_calls"]],
            Dist(kind="fixed", median=0.001),
        ),
        "grade_s": _empirical(
            # a grading served by the group's grade cache ran no grading (the simulator grades every rollout)
            [tr["timings"].get("grading_s", 0.0) for tr in trajs if not tr.get("grading", {}).get("cached")],
            Dist(kind="fixed", median=1.0),
        ),
        "create_s": _empirical(
            [
                tr["timings"].get("rollout_s", 0.0)
                - tr["timings"].get("policy_s", 0.0)
                - tr["timings"].get("tools_s", 0.0)
                - tr["timings"].get("grading_s", 0.0)
                for tr in trajs
            ],
            Dist(kind="fixed", median=0.01),
        ),
        "reward_p": sum((tr.get("reward") or 0) >= 1.0 for tr in trajs) / len(trajs),
    }
    per_token = [t["duration_s"] / t["completion_tokens"] for t in turns if t.get("completion_tokens")]
    batches = [m["engine_decode_batch_mean"] for m in steps if m.get("engine_decode_batch_mean")]
    batch = statistics.fmean(batches) if batches else 1.0
    # seconds per token at the mean batch = step_s * (1 + _ROW_SHARE * batch)
    step_s = statistics.median(per_token) / (1 + _ROW_SHARE * batch)
    trained = [m for m in steps if m.get("updated") and m["trainer"].get("tokens")]
    t0, per_tok = _fit_line([float(m["trainer"]["tokens"]) for m in trained], [m["train_s"] for m in trained])
    cfg_path = run / "config.json"
    shape: dict[str, Any] = {}
    if cfg_path.is_file():
        rc = json.loads(cfg_path.read_text())
        ro = rc["rollout"]
        shape = {
            "group_size": ro["group_size"],
            "tasks_per_step": ro["tasks_per_step"],
            "sandboxes": ro["concurrency"],
            "max_staleness": rc["max_staleness"],
            "mode": rc["mode"],
            "timeout_s": ro["timeout_s"],
            "tasks": max(2, rc["tasks"]["count"] - rc["tasks"]["held_out"]) if rc["tasks"]["source"] == "quickstart" else 1000,
        }  # fmt: skip
        # Runs written before engine backends existed have no `replicas`: one embedded engine.
        from inhabit.placement.engine_backends import ENGINE_BACKENDS

        eng = rc.get("engine", {})
        if eng.get("backend", "embedded") in ENGINE_BACKENDS.names(local_only=True):
            shape["engines"] = int(eng.get("replicas", 1))
    last = steps[-1]
    measured = {
        "rollouts_per_min": last["trajectories_per_min"],
        "trainer_idle": last["trainer_idle_fraction"],
        "elapsed_s": last["elapsed_s"],
        "steps": last["version"],
        "mean_decode_batch": batch,
    }
    cfg = ScaleConfig.model_validate(
        {
            "name": f"calibrated:{run.name}",
            "engines": 1,  # shape["engines"] overrides this where config.json names the replicas
            "measure": "whole",
            "measure_steps": len({m["elapsed_s"] for m in steps}),
            **shape,
            "engine": {"step_s": step_s, "per_seq_s": step_s * _ROW_SHARE},
            "episode": episode,
            "trainer": {"step_s": t0, "per_token_s": per_tok},
        }
    )
    return cfg, measured
