"""`inhabit eval`: run a policy over every task K times with the exact harness of training
(`inhabit.harness.rollout.run_rollout`: same loop, tools, sandbox and grading) and score it.

Each finished (task, sample) is appended as one JSON line to the records file as soon as it ends,
so an interrupted eval resumes: `run_eval(..., resume=True)` skips every pair already recorded and
runs the rest. A rollout that fails (policy error, sandbox gone) is a record with its status, never
a crash of the eval; only records are summarized (`evaluation.metrics.summarize`). Such a failure
of the machinery (`INFRA_STATUSES`) measures nothing about the model, so it never counts as done:
`--resume` runs that sample again. A policy that cannot be reached at all (`PolicyUnreachable`)
stops the whole eval with that error, before anything more is recorded.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from inhabit.contracts import Policy
from inhabit.errors import InhabitError, PolicyUnreachable
from inhabit.evaluation.capture import CapturingProvider
from inhabit.harness.config import HarnessConfig
from inhabit.log import get_logger
from inhabit.sandbox.base import SandboxProvider
from inhabit.tasks.task import Task, load_task
from inhabit.types import Trajectory

__all__ = [
    "INFRA_STATUSES",
    "EvalError",
    "discover_tasks",
    "done_records",
    "read_records",
    "record_of",
    "run_eval",
]

log = get_logger(__name__)

# Rollout statuses that say the machinery failed (policy, sandbox, grading), not the model.
INFRA_STATUSES = frozenset({"policy_error", "sandbox_error", "grading_error", "error"})


class EvalError(InhabitError):
    """An evaluation cannot start (no tasks, records of another run in the way)."""


def discover_tasks(path: str | Path) -> list[Task]:
    """Every task under `path` (a task directory itself, or a folder of them), sorted by id."""
    root = Path(path)
    if (root / "task.toml").is_file():
        return [load_task(root)]
    if not root.is_dir():
        raise EvalError(f"{root} is not a folder of task directories")
    tasks = [load_task(p.parent) for p in sorted(root.glob("*/task.toml"))]
    if not tasks:
        raise EvalError(
            f"no task directories (with task.toml) under {root}; build some with `inhabit tasks build`"
        )
    ids = [t.id for t in tasks]
    if len(set(ids)) != len(ids):
        raise EvalError(f"{root} holds two tasks with the same id; ids must be unique")
    return sorted(tasks, key=lambda t: t.id)


def record_of(traj: Trajectory, sample: int, seconds: float) -> dict[str, Any]:
    """The eval record of one rollout (what the records file holds, one per line)."""
    turns = [t for s in traj.segments for t in s.turns]
    completion = sum(t.completion_tokens or len(t.completion_token_ids or ()) for t in turns)
    prompt = sum(t.prompt_tokens or 0 for t in turns)
    return {
        "task_id": traj.task_id,
        "sample": sample,
        "reward": traj.reward,
        "success": bool(traj.reward is not None and traj.reward >= 1.0 and traj.status != "grading_error"),
        "status": traj.status,
        "turns": traj.num_turns,
        "completion_tokens": completion,
        "prompt_tokens": prompt,
        "flags": list(traj.flags),
        "error": traj.error,
        "seconds": round(seconds, 3),
    }


async def _compose(composer: Any, traj: Trajectory, capture: CapturingProvider) -> dict[str, Any]:
    if capture.changes is None:
        return {"composed_reward": None, "reward_parts": {}, "reward_error": capture.error or "no workspace"}
    out = await composer.compose(tests=traj.reward, changes=capture.changes, instruction=traj.instruction,
                                 message=traj.final_message or "")  # fmt: skip
    judges = {k: {"error": v.get("error"), "cached": v.get("cached")} for k, v in out.details.items()
              if k.startswith("judge_")}  # fmt: skip
    return {"composed_reward": out.reward, "reward_parts": out.parts, "missing_parts": out.missing,
            "judges": judges}  # fmt: skip


def read_records(path: Path) -> list[dict[str, Any]]:
    """Records from a records file; a last line cut by a crash is ignored."""
    out = []
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def done_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records that count as done: the last one of each (task, sample), unless the machinery
    failed in it (then `--resume` runs that sample again)."""
    last = {(r.get("task_id"), r.get("sample", 0)): r for r in records}
    return [r for r in last.values() if r.get("status") not in INFRA_STATUSES]


async def run_eval(
    tasks: list[Task],
    policy: Policy,
    provider: SandboxProvider,
    records_path: str | Path,
    *,
    samples: int = 1,
    concurrency: int = 4,
    resume: bool = False,
    harness: HarnessConfig | None = None,
    on_record: Callable[[dict[str, Any]], None] | None = None,
    save_trajectories: Path | None = None,
    composer: Any = None,
    deadline: float | None = None,
) -> list[dict[str, Any]]:
    """Run every (task, sample) not yet recorded; return all records (old and new).

    Samples run in rounds (sample 0 of every task, then sample 1...). With `deadline` (a
    `time.monotonic()` value) no episode starts after it; those under way finish and are recorded.

    With `composer` (an `inhabit.rewards.compose.RewardComposer`), each record also holds the
    composed reward and its parts (lint delta, diff size, judges) over what the agent changed;
    success stays defined by the tests alone."""
    from inhabit.harness.rollout import run_rollout

    path = Path(records_path)
    existing = read_records(path)
    if existing and not resume:
        raise EvalError(f"{path} already holds {len(existing)} records; pass --resume to continue it "
                        "or choose another --out")  # fmt: skip
    wanted = {t.id for t in tasks}
    records = [
        r for r in done_records(existing) if r.get("task_id") in wanted and r.get("sample", 0) < samples
    ]
    done = {(r["task_id"], r["sample"]) for r in records}
    todo = [(t, s) for s in range(samples) for t in tasks if (t.id, s) not in done]
    lock = asyncio.Lock()
    queue: asyncio.Queue = asyncio.Queue()
    for item in todo:
        queue.put_nowait(item)

    async def worker() -> None:
        while not queue.empty():
            if deadline is not None and time.monotonic() >= deadline:
                return
            task, sample = queue.get_nowait()
            t0 = time.monotonic()
            capture = CapturingProvider(provider, task.workspace_dir) if composer is not None else None
            try:
                traj = await run_rollout(task, policy, capture or provider, config=harness)
            except PolicyUnreachable:
                raise
            except Exception as e:  # run_rollout turns failures into data; this is a last guard
                traj = Trajectory(task_id=task.id, instruction=task.instruction, status="error",
                                  error=f"{type(e).__name__}: {e}")  # fmt: skip
            rec = record_of(traj, sample, time.monotonic() - t0)
            if capture is not None:
                rec |= await _compose(composer, traj, capture)
            async with lock:
                path.parent.mkdir(parents=True, exist_ok=True)
                with path.open("a") as f:
                    f.write(json.dumps(rec) + "\n")
                if save_trajectories is not None:
                    save_trajectories.mkdir(parents=True, exist_ok=True)
                    (save_trajectories / f"{task.id}.{sample}.json").write_text(traj.to_json())
                records.append(rec)
                if on_record:
                    on_record(rec)

    workers = [asyncio.ensure_future(worker()) for _ in range(max(1, min(concurrency, len(todo))))]
    try:
        await asyncio.gather(*workers)
    finally:  # one worker's PolicyUnreachable stops the others: their rollouts could not succeed
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
    return records
