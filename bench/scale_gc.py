"""Benchmark: what the pipeline's GC settings save the control plane.

The simulated 8-engine, 3k-sandbox scenario of configs/scale.toml, four times in one process,
alternating the pipeline's `control_plane_gc` (what a run uses) with Python's default thresholds;
prints one JSON line per run with the driver's CPU per rollout.

    PYTHONPATH=src .venv/bin/python bench/scale_gc.py
"""

import contextlib
import json
import os
import time
from pathlib import Path

from inhabit.config import load_config
from inhabit.orchestrator import pipeline
from inhabit.orchestrator.scale.config import ScaleConfig
from inhabit.orchestrator.scale.simulate import simulate

ROOT = Path(__file__).resolve().parents[1]
base = load_config(
    ScaleConfig, ROOT / "configs" / "scale.toml", ["engines=8", "sandboxes=3000", "tasks=20000"]
)
rows = []
real = pipeline.control_plane_gc
runs = (
    ("run settings", real),
    ("python defaults", contextlib.nullcontext),
    ("run settings again", real),
    ("python defaults again", contextlib.nullcontext),
)
for label, ctx in runs:
    pipeline.control_plane_gc = ctx
    t0 = time.monotonic()
    r = simulate(base)
    rows.append(
        {
            "label": label,
            "cpu_ms_per_rollout": r["cpu_ms_per_rollout"],
            "rollouts": r["rollouts"],
            "wall_s": time.monotonic() - t0,
            "load": os.getloadavg()[0],
        }
    )
    print(json.dumps(rows[-1]), flush=True)
ours = [r["cpu_ms_per_rollout"] for r in rows if r["label"].startswith("run settings")]
default = [r["cpu_ms_per_rollout"] for r in rows if r["label"].startswith("python defaults")]
print(f"CPU per rollout, Python's defaults / the run's settings: {sum(default) / sum(ours):.2f}x")
