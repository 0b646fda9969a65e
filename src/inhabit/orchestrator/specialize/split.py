"""Train / held-out split of built tasks BY MODULE: every mutant of one source file lands on the
same side, so held-out success measures transfer to code the policy never trained on, not recall
of a sibling mutant of the same function.

A task's module is the `path` of its `mutation.json` (written by `inhabit tasks build`); a task
without one is a module of its own. Modules are ordered by a seeded hash of their path (stable
across runs and machines, independent of the build's order), and taken into held-out until it
holds `held_out_share` of the tasks; both sides keep at least one module.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from inhabit.errors import OrchestratorError

__all__ = ["Split", "module_of", "split_by_module"]


@dataclass(frozen=True)
class Split:
    train: list[str]
    """Task ids to train on."""
    held_out: list[str]
    """Task ids that only evaluate."""
    modules: dict[str, str]
    """Module path -> "train" or "held-out"."""


def module_of(task_dir: Path) -> str:
    """The source file a built task's mutant lives in (its id when the task says nothing)."""
    meta = task_dir / "mutation.json"
    if meta.is_file():
        try:
            path = json.loads(meta.read_text()).get("path")
        except ValueError:
            path = None
        if isinstance(path, str) and path:
            return path
    return f"<task {task_dir.name}>"


def split_by_module(task_dirs: list[Path], held_out_share: float = 0.3, seed: int = 0) -> Split:
    """Split `task_dirs` by module (see the module docstring). Needs two modules at least."""
    if not 0.0 < held_out_share < 1.0:
        raise OrchestratorError(f"held-out share must lie in (0, 1), got {held_out_share}")
    by_module: dict[str, list[str]] = defaultdict(list)
    for d in task_dirs:
        by_module[module_of(d)].append(d.name)
    if len(by_module) < 2:
        raise OrchestratorError(
            f"the tasks come from {len(by_module)} module(s); a split by module needs two or more "
            "(build more tasks: raise tasks.max_candidates, or give a project with more source files)"
        )

    def rank(module: str) -> str:
        return hashlib.sha256(f"{seed}:{module}".encode()).hexdigest()

    order = sorted(by_module, key=rank)
    total = sum(len(v) for v in by_module.values())
    held: list[str] = []
    side: dict[str, str] = {}
    for module in order:
        wants_more = len(held) < held_out_share * total
        keeps_train = len(side) < len(order) - 1 or any(v == "train" for v in side.values())
        if (wants_more or not held) and keeps_train:
            side[module] = "held-out"
            held += by_module[module]
        else:
            side[module] = "train"
    train = sorted(t for m, ids in by_module.items() if side[m] == "train" for t in ids)
    return Split(train=train, held_out=sorted(held), modules=dict(sorted(side.items())))
