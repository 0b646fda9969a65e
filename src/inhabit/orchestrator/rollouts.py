"""The rollout side: G episodes of a task through the real harness, sandbox and engine.

Every episode gets its own `LocalPolicy` over the one shared engine (which batches all of them),
a fresh sandbox from the task's workspace, and grading (`inhabit.harness.rollout.run_rollout`).
Whatever goes wrong (a sandbox error, an engine error, a timeout, a bug) ends as a trajectory
with a status and an error, never as an exception out of `run_group`: a failed rollout is data.
Every trajectory is appended to `trajectories.jsonl` in the run folder, with `metadata` saying
which group, rollout and purpose ("train" or "eval") it belonged to.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

from inhabit.harness.config import HarnessConfig
from inhabit.harness.rollout import run_rollout
from inhabit.inference.engine import InferenceEngine
from inhabit.log import get_logger
from inhabit.orchestrator.buffer import Group
from inhabit.orchestrator.config import RolloutConfig
from inhabit.sandbox.base import SandboxProvider
from inhabit.types import Trajectory

log = get_logger(__name__)


class TrajectoryLog:
    """Appends trajectory records (one JSON object per line) to a file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = self.path.open("a")
        self.written = 0

    def write(self, traj: Trajectory) -> None:
        self._file.write(traj.to_json() + "\n")
        self._file.flush()
        self.written += 1

    def close(self) -> None:
        self._file.close()


class RolloutRunner:
    """Runs episodes against one engine; `run_group` never raises for a failed rollout."""

    def __init__(
        self,
        engine: InferenceEngine,
        tokenizer: Any,
        provider: SandboxProvider,
        *,
        harness: HarnessConfig,
        rollout: RolloutConfig,
        log_file: TrajectoryLog | None = None,
        seed: int = 0,
    ) -> None:
        self.engine, self.tokenizer, self.provider = engine, tokenizer, provider
        # rollout.max_tokens caps every model turn (the harness's own cap may be lower).
        self.harness = harness.model_copy(
            update={"max_turn_tokens": min(harness.max_turn_tokens, rollout.max_tokens)}
        )
        self.cfg = rollout
        self.log_file = log_file
        self.seed = seed
        self._sem = asyncio.Semaphore(rollout.concurrency)
        self._episodes = 0
        self.completion_tokens = 0
        self.finished = 0

    async def run_one(self, task: Any, meta: dict[str, Any]) -> Trajectory:
        from inhabit.inference.local_policy import LocalPolicy

        self._episodes += 1
        policy = LocalPolicy(
            self.engine,
            self.tokenizer,
            temperature=self.cfg.temperature,
            top_p=self.cfg.top_p,
            seed=self.seed * 1_000_003 + self._episodes * 7919,
        )
        async with self._sem:
            t0 = time.monotonic()
            try:
                traj = await asyncio.wait_for(
                    run_rollout(task, policy, self.provider, config=self.harness), self.cfg.timeout_s
                )
            except TimeoutError:
                traj = _failed(task, "error", f"timeout: the rollout took over {self.cfg.timeout_s:g} s")
            except Exception as e:  # run_rollout turns failures into data; this is the last guard
                log.exception("rollout of %s raised", task.id)
                traj = _failed(task, "error", f"{type(e).__name__}: {e}")
            # A turn whose engine request failed is an engine error, whatever the harness made of it.
            if traj.status in ("finished", "turn_limit") and _engine_error(traj):
                traj = traj.model_copy(update={"status": "policy_error", "error": _engine_error(traj)})
            traj = traj.model_copy(
                update={"metadata": {**traj.metadata, **meta, "wall_s": round(time.monotonic() - t0, 4)}}
            )
        self.completion_tokens += sum(t.completion_tokens or 0 for s in traj.segments for t in s.turns)
        self.finished += 1
        if self.log_file is not None:
            self.log_file.write(traj)
        return traj

    async def run_group(
        self, task: Any, index: int, *, purpose: str = "train", size: int | None = None
    ) -> Group:
        start = self.engine.version
        g = size or self.cfg.group_size
        trajs = await asyncio.gather(
            *(self.run_one(task, {"purpose": purpose, "group": index, "rollout": i}) for i in range(g))
        )
        return Group(task_id=task.id, index=index, trajectories=list(trajs), start_version=start, task=task)


def _failed(task: Any, status: str, error: str) -> Trajectory:
    return Trajectory(task_id=task.id, instruction=task.instruction, status=status, error=error)  # type: ignore[arg-type]


def _engine_error(traj: Trajectory) -> str | None:
    for seg in traj.segments:
        for turn in seg.turns:
            if turn.finish_reason == "error":
                return "engine error in a turn"
    return None


def summarize_json(traj: Trajectory) -> str:
    return json.dumps({"task": traj.task_id, "status": traj.status, "reward": traj.reward})
