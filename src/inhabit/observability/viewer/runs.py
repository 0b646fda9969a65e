"""Run folders as the viewer sees them: discovery, summary, metrics read from an offset, evaluations.

A run folder is any directory holding `config.json`, `metrics.jsonl` or `trajectories.jsonl`
(docs/architecture.md "Run folder"). A folder given to `inhabit view` that is not one itself is
searched two levels down for runs, so `inhabit view runs/` shows every run under it.

Everything here only reads. Paths are built from the run folder and fixed names; the one path that
comes from data (a task id, for the task's original workspace) is checked to stay inside the
run's folder (`Run.task_workspace`).
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inhabit.observability.metrics import flatten
from inhabit.observability.viewer.index import TrajectoryIndex

RUN_MARKERS = ("config.json", "metrics.jsonl", "trajectories.jsonl")
LIVE_WINDOW_S = 120.0
"""A run without summary.json whose metrics or trajectories changed this recently counts as live."""


def is_run_dir(path: Path) -> bool:
    return path.is_dir() and any((path / m).is_file() for m in RUN_MARKERS)


def discover(paths: list[Path]) -> list[Path]:
    """The run folders among `paths`, or under them (two levels down), in a stable order."""
    found: list[Path] = []
    for p in paths:
        p = p.resolve()
        if is_run_dir(p):
            found.append(p)
            continue
        if p.is_dir():
            for child in sorted(p.iterdir()):
                if is_run_dir(child):
                    found.append(child)
                elif child.is_dir():
                    found.extend(c for c in sorted(child.iterdir()) if is_run_dir(c))
    out: list[Path] = []
    for p in found:
        if p not in out:
            out.append(p)
    return out


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "run"


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class Run:
    """One run folder: its id in URLs, its trajectory index and its metrics read so far."""

    id: str
    path: Path
    index: TrajectoryIndex = field(init=False)

    def __post_init__(self) -> None:
        self.index = TrajectoryIndex(self.path / "trajectories.jsonl")

    @property
    def name(self) -> str:
        return self.path.name

    def config(self) -> dict[str, Any]:
        return _read_json(self.path / "config.json") or {}

    def specialize_report(self) -> dict[str, Any] | None:
        """The report of an `inhabit specialize` run folder (`specialize.json`), else None."""
        report = _read_json(self.path / "specialize.json")
        return report if isinstance(report, dict) and report.get("format") == 1 else None

    def config_summary(self) -> dict[str, Any]:
        """The few settings that tell runs apart at a glance."""
        c = self.config()
        model = c.get("model") or {}
        spec = model.get("spec") or {}
        rollout = c.get("rollout") or {}
        tasks = c.get("tasks") or {}
        out = {
            "mode": c.get("mode"),
            "steps": c.get("steps"),
            "model": model.get("path")
            or (f"{spec.get('num_layers')} x {spec.get('hidden_size')}" if spec else None),
            "tasks": tasks.get("source") or tasks.get("path"),
            "G x tasks/step": f"{rollout.get('group_size')} x {rollout.get('tasks_per_step')}"
            if rollout
            else None,
            "lr": (c.get("trainer") or {}).get("lr"),
            "max_staleness": c.get("max_staleness"),
        }
        return {k: v for k, v in out.items() if v is not None}

    def summary(self) -> dict[str, Any] | None:
        return _read_json(self.path / "summary.json")

    def status(self) -> str:
        """finished, stopped, live, or idle (no summary and nothing written lately)."""
        s = self.summary()
        if s is not None:
            return "stopped" if s.get("stopped") else "finished"
        mtimes = [(self.path / n).stat().st_mtime for n in RUN_MARKERS[1:] if (self.path / n).exists()]
        if mtimes and time.time() - max(mtimes) < LIVE_WINDOW_S:
            return "live"
        return "idle"

    def evaluations(self) -> dict[str, dict[str, Any]]:
        """Every evaluation the folder holds: eval.json's labels, and each eval*.json of `inhabit eval`."""
        out: dict[str, dict[str, Any]] = {}
        for p in sorted(self.path.glob("eval*.json")):
            d = _read_json(p)
            if not isinstance(d, dict):
                continue
            if "success_rate" in d:  # `inhabit eval --out`: one summary
                out[p.stem] = d
            else:  # the run's eval.json: {"before": {...}, "after": {...}}
                out.update({f"{k}" if p.name == "eval.json" else f"{p.stem}.{k}": v for k, v in d.items()})
        return {k: v for k, v in out.items() if isinstance(v, dict)}

    def best_success(self) -> float | None:
        rates = [e.get("success_rate") for e in self.evaluations().values()]
        nums = [r for r in rates if isinstance(r, int | float)]
        return max(nums) if nums else None

    def steps_done(self) -> int:
        last = None
        records, _ = read_metrics(self.path / "metrics.jsonl", 0)
        for r in records:
            if "step" in r:
                last = r["step"]
        return int(last) if isinstance(last, int | float) else 0

    def task_workspace(self, task_id: str) -> Path | None:
        """The original workspace of `task_id` from the run's task cache, if it is there and inside the run."""
        root = self.path.resolve()
        for tasks in sorted(root.glob("cache/tasks-*")):
            candidate = (tasks / task_id / "workspace").resolve()
            if candidate.is_relative_to(tasks.resolve()) and candidate.is_dir():
                return candidate
        return None

    def tokenizer_file(self) -> Path | None:
        """A tokenizer.json of the run's model (bootstrapped model or a checkpoint), to name tokens."""
        for pattern in ("cache/model-*/tokenizer.json", "checkpoints/*/tokenizer.json"):
            for p in sorted(self.path.glob(pattern)):
                return p
        return None


def make_runs(paths: list[Path]) -> dict[str, Run]:
    """Runs keyed by a URL-safe id made from the folder name (with a suffix where two share one)."""
    runs: dict[str, Run] = {}
    for p in discover(paths):
        rid = base = _slug(p.name)
        i = 2
        while rid in runs:
            rid, i = f"{base}-{i}", i + 1
        runs[rid] = Run(rid, p)
    return runs


def read_metrics(path: Path, offset: int, limit_bytes: int = 8 << 20) -> tuple[list[dict[str, Any]], int]:
    """Complete metric records from byte `offset` on, and the offset to ask from next time."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            chunk = f.read(limit_bytes)
    except FileNotFoundError:
        return [], 0
    end = chunk.rfind(b"\n") + 1  # a partly written last line waits for the next poll
    records: list[dict[str, Any]] = []
    for line in chunk[:end].splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            records.append(d)
    return records, offset + end


def points(records: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Records flattened to dotted numeric leaves (`reward.mean`), each with its `step`."""
    out = []
    for r in records:
        flat = {k: v for k, v in flatten(r).items() if math.isfinite(v)}
        if "step" in flat:
            out.append(flat)
    return out
