"""Reward composition: weighted parts, each a number in [0, 1] or missing.

Parts (weights in `RewardConfig`; a weight of 0 turns a part off):
  tests     grading's reward (1 when every required test passes, else 0);
  lint      ruff findings on the changed .py files, before vs after the change:
            1 - min(1, new_findings / lint_scale), new_findings = max(0, after - before);
            fixing old findings does not earn more than 1;
  diff      change size: 1 while added + removed lines <= diff_free_lines, then falling linearly to
            0 at diff_free_lines + diff_scale_lines (test files excluded: they are restored anyway);
  <judge>   one part per LLM judge (`rewards.judge`), its score / 10.

A part can be missing: a judge that gave no score, lint on a change with no .py files. `missing`
says what then happens: "renormalize" (default) divides by the weights of the available parts
only; "zero" counts a missing part as 0. Missing parts are always listed in
`RewardBreakdown.missing`, never silently turned into numbers. With `gate_on_tests` the whole
reward is 0 unless the tests part is 1 (shaping then only ranks correct solutions).

`tests` weighted alone (the default) reproduces grading's binary reward exactly.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from inhabit.config import Config
from inhabit.grading.infra import has_edge_space, is_test_path
from inhabit.rewards.judge import Judge, JudgeCache, JudgeConfig, JudgeResult
from inhabit.sandbox.base import Sandbox

__all__ = [
    "Changes",
    "RewardBreakdown",
    "RewardComposer",
    "RewardConfig",
    "diff_part",
    "lint_counts",
    "workspace_changes",
]


class RewardConfig(Config):
    """How a rollout's reward is made from its parts (see the module docstring)."""

    tests_weight: float = Field(1.0, ge=0, description="Weight of grading's test reward.")
    lint_weight: float = Field(0.0, ge=0, description="Weight of the lint-delta part.")
    lint_scale: int = Field(5, ge=1, description="New ruff findings that bring the lint part to 0.")
    diff_weight: float = Field(0.0, ge=0, description="Weight of the diff-size part.")
    diff_free_lines: int = Field(20, ge=0, description="Changed lines with no penalty.")
    diff_scale_lines: int = Field(200, ge=1, description="Lines past the free ones that bring the part to 0.")
    judges: list[JudgeConfig] = Field(default_factory=list, description="LLM judges, one part each.")
    missing: Literal["renormalize", "zero"] = Field(
        "renormalize", description="A missing part: leave it out of the weights, or count it as 0."
    )
    gate_on_tests: bool = Field(False, description="Reward 0 unless the tests part is 1.")
    cache_dir: str | None = Field(None, description="Judge score cache folder; None: no cache.")


def _shown(name: str) -> str:
    """A diff header's file name, quoted (as git quotes) where a part of it begins or ends with
    whitespace or holds a character that does not print: `"b/calc.py "` must not read as calc.py
    to a judge or a reviewer."""
    if name.isprintable() and not has_edge_space(name):
        return name
    return json.dumps(name)


@dataclass
class Changes:
    """Files a rollout changed: original and final text (None = absent), and the unified diff."""

    before: dict[str, str | None] = field(default_factory=dict)
    after: dict[str, str | None] = field(default_factory=dict)

    @property
    def diff(self) -> str:
        out = []
        for path in sorted(self.before):
            a, b = self.before[path], self.after[path]
            out += difflib.unified_diff(
                (a or "").splitlines(True), (b or "").splitlines(True),
                "/dev/null" if a is None else _shown(f"a/{path}"), "/dev/null" if b is None else _shown(f"b/{path}"),
            )  # fmt: skip
        return "".join(out)

    def changed_lines(self, *, skip_tests: bool = True) -> int:
        n = 0
        for path in self.before:
            if skip_tests and is_test_path(path):
                continue
            for line in difflib.unified_diff((self.before[path] or "").splitlines(), (self.after[path] or "").splitlines(), lineterm=""):  # fmt: skip
                if line[:1] in "+-" and not line.startswith(("+++", "---")):
                    n += 1
        return n


async def workspace_changes(original: Path, sandbox: Sandbox, *, max_bytes: int = 1_000_000) -> Changes:
    """Text files that differ between the host folder `original` and the sandbox's workspace
    (added, removed, edited; binary or larger than `max_bytes` files are skipped)."""
    changes = Changes()
    final = {e.path for e in await sandbox.list_files(".") if e.kind == "file" and e.size <= max_bytes}
    orig = {
        p.relative_to(original).as_posix() for p in original.rglob("*") if p.is_file() and not p.is_symlink()
    }
    for path in sorted(final | orig):
        if "__pycache__" in path or path.endswith(".pyc"):
            continue
        try:
            a = (original / path).read_text() if path in orig else None
            b = (await sandbox.read_file(path)).decode() if path in final else None
        except (UnicodeDecodeError, OSError):
            continue
        if a != b:
            changes.before[path], changes.after[path] = a, b
    return changes


def lint_counts(changes: Changes) -> tuple[int, int] | None:
    """(findings before, findings after) of ruff (default rules, --isolated) on the changed .py files;
    None when no .py file changed. The files are only parsed by ruff, never run."""
    paths = [p for p in changes.before if p.endswith(".py") and not is_test_path(p)]
    if not paths:
        return None
    counts = []
    for side in (changes.before, changes.after):
        with tempfile.TemporaryDirectory(prefix="inhabit-lint-") as tmp:
            files = []
            for p in paths:
                if side[p] is not None:
                    (Path(tmp) / p).parent.mkdir(parents=True, exist_ok=True)
                    (Path(tmp) / p).write_text(side[p] or "")
                    files.append(p)
            if not files:
                counts.append(0)
                continue
            res = subprocess.run(
                [sys.executable, "-m", "ruff", "check", "--isolated", "--output-format", "json", "--exit-zero", *files],
                cwd=tmp, capture_output=True, text=True, timeout=120,
            )  # fmt: skip
            counts.append(len(json.loads(res.stdout or "[]")))
    return counts[0], counts[1]


def diff_part(lines: int, config: RewardConfig) -> float:
    over = max(0, lines - config.diff_free_lines)
    return max(0.0, 1.0 - over / config.diff_scale_lines)


@dataclass
class RewardBreakdown:
    """The composed reward and every part: value (None = missing), weight, and judge details."""

    reward: float
    parts: dict[str, float | None]
    weights: dict[str, float]
    missing: list[str]
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class RewardComposer:
    """Composes rewards under one `RewardConfig`; holds the judges' clients and cache."""

    def __init__(self, config: RewardConfig) -> None:
        self.config = config
        cache = JudgeCache(config.cache_dir) if config.cache_dir else None
        self.judges = [Judge(j, cache) for j in config.judges]

    def combine(self, parts: dict[str, float | None], weights: dict[str, float]) -> tuple[float, list[str]]:
        missing = [k for k, v in parts.items() if v is None and weights[k] > 0]
        total = value = 0.0
        for k, v in parts.items():
            w = weights[k]
            if w <= 0 or (v is None and self.config.missing == "renormalize"):
                continue
            total += w
            value += w * (v or 0.0)
        reward = value / total if total > 0 else 0.0
        if self.config.gate_on_tests and parts.get("tests") != 1.0:
            reward = 0.0
        return reward, missing

    async def compose(
        self, *, tests: float | None, changes: Changes, instruction: str = "", message: str = ""
    ) -> RewardBreakdown:
        """Every enabled part, then the weighted reward. Judges run concurrently."""
        cfg = self.config
        parts: dict[str, float | None] = {}
        weights: dict[str, float] = {}
        details: dict[str, Any] = {}
        parts["tests"], weights["tests"] = tests, cfg.tests_weight
        if cfg.lint_weight > 0:
            counts = await asyncio.to_thread(lint_counts, changes)
            weights["lint"] = cfg.lint_weight
            parts["lint"] = (
                None if counts is None else 1.0 - min(1.0, max(0, counts[1] - counts[0]) / cfg.lint_scale)
            )
            details["lint_findings"] = counts
        if cfg.diff_weight > 0:
            lines = changes.changed_lines()
            parts["diff"], weights["diff"] = diff_part(lines, cfg), cfg.diff_weight
            details["changed_lines"] = lines
        if self.judges:
            diff = changes.diff
            results: list[JudgeResult] = await asyncio.gather(
                *(j.score(instruction=instruction, diff=diff, message=message) for j in self.judges)
            )
            for judge, res in zip(self.judges, results, strict=True):
                name = f"judge_{judge.config.name}"
                parts[name], weights[name] = res.score, judge.config.weight
                details[name] = res.to_dict()
        reward, missing = self.combine(parts, weights)
        return RewardBreakdown(reward=reward, parts=parts, weights=weights, missing=missing, details=details)

    async def close(self) -> None:
        for j in self.judges:
            await j.close()
