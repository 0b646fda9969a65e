"""Held-out evaluation of one model folder through the harness (`inhabit eval`'s machinery), and
the one figure the format bootstrap needs: the share of the model's action turns that parse as
calls of the harness's tools.

Records go to `<folder>/records.jsonl` (appended as episodes end: an evaluation cut short resumes)
and each episode's trajectory to `<folder>/trajectories/`.

An evaluation given a deadline (the baseline, at its share of the budget) starts no episode after
it and keeps its complete part (`complete_part`): whole rounds of samples over every task, or, when
not even the first round finished, the tasks whose first sample did. The final evaluation then runs
exactly those tasks and samples, so before and after stay paired by task.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from inhabit.errors import OrchestratorError
from inhabit.orchestrator.specialize.config import SpecializeConfig
from inhabit.tasks.task import Task
from inhabit.types import Trajectory

__all__ = ["complete_part", "evaluate_model", "parse_rate"]


def parse_rate(trajectories: list[Trajectory]) -> dict[str, Any]:
    """Share of action turns holding at least one call of a harness tool (a call the harness could
    run: its tool name parsed and known), over every turn of `trajectories`."""
    from inhabit.harness.tools import TOOLS

    turns = parsed = 0
    for traj in trajectories:
        n = sum(1 for s in traj.segments for t in s.turns if t.kind == "action")
        good = {c.turn for c in traj.tool_calls if c.tool in TOOLS}
        turns += n
        parsed += len(good)
    return {"turns": turns, "parsed": parsed, "rate": parsed / turns if turns else 0.0}


def read_trajectories(folder: Path, records: list[dict[str, Any]] | None = None) -> list[Trajectory]:
    """The saved trajectories in `folder`; with `records`, only those of these (task, sample)s."""
    paths = sorted(folder.glob("*.json"))
    if records is not None:
        names = {f"{r['task_id']}.{r.get('sample', 0)}.json" for r in records}
        paths = [p for p in paths if p.name in names]
    return [Trajectory.model_validate_json(p.read_text()) for p in paths]


def complete_part(records: list[dict[str, Any]], task_ids: list[str]) -> tuple[list[str], int]:
    """The (tasks, samples) an evaluation cut by its deadline measured in full: every task with
    the number of whole rounds all of them finished, else the tasks whose sample 0 finished, once."""
    done: dict[str, set[int]] = {t: set() for t in task_ids}
    for r in records:
        if r["task_id"] in done:
            done[r["task_id"]].add(r.get("sample", 0))
    rounds = 0
    while done and all(rounds in s for s in done.values()):
        rounds += 1
    if rounds:
        return list(task_ids), rounds
    return [t for t in task_ids if 0 in done[t]], 1


def evaluate_model(
    model_dir: Path,
    tasks: list[Task],
    out: Path,
    cfg: SpecializeConfig,
    *,
    samples: int,
    harness: Any = None,
    on_record: Any = None,
    deadline: float | None = None,
) -> dict[str, Any]:
    """Run `samples` episodes of each task with the model folder; return the summary (pass@k,
    turns, tokens, flags), the records and the parse rate of its turns. With `deadline` (a
    `time.monotonic()` value), the summary and records are those of its complete part, whose
    tasks and samples are returned too."""
    from inhabit.evaluation.metrics import summarize
    from inhabit.evaluation.runner import run_eval
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.local_policy import LocalPolicy
    from inhabit.sandbox import create_provider

    engine = EngineConfig(**cfg.engine.model_dump(include=set(EngineConfig.model_fields)))

    async def go() -> list[dict[str, Any]]:
        policy = LocalPolicy.from_path(
            model_dir, engine_config=engine, temperature=cfg.eval.temperature, seed=cfg.seed
        )
        provider = create_provider(cfg.sandbox)
        try:
            return await run_eval(
                tasks, policy, provider, out / "records.jsonl", samples=samples,
                concurrency=cfg.eval.concurrency, resume=True, harness=harness or cfg.harness,
                on_record=on_record, save_trajectories=out / "trajectories", deadline=deadline,
            )  # fmt: skip
        finally:
            await provider.close()
            await policy.close()

    records = asyncio.run(go())
    ids = [t.id for t in tasks]
    if deadline is not None:
        ids, samples = complete_part(records, ids)
    kept = set(ids)
    records = [r for r in records if r["task_id"] in kept and r.get("sample", 0) < samples]
    if not records:
        raise OrchestratorError(
            f"no episode of the evaluation in {out} finished (see {out / 'records.jsonl'}): "
            "give the run more time (--budget) or fewer, shorter episodes (eval.concurrency, harness.max_turns)"
        )
    summary = summarize(records)
    solved = [r for r in records if r["success"]]
    summary["turns_per_solved"] = sum(r["turns"] for r in solved) / len(solved) if solved else None
    summary["tokens_per_solved"] = (
        sum(r["completion_tokens"] for r in solved) / len(solved) if solved else None
    )
    summary["parse"] = parse_rate(read_trajectories(out / "trajectories", records))
    summary.pop("per_task", None)
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return {"summary": summary, "records": records, "task_ids": ids, "samples": samples}
