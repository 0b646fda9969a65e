"""Simulated users of `inhabit online simulate`: who answers, what they answer, and one session.

A user brings a task of the quickstart family (its workspace is the user's repository, opted in
with `.inhabit/online.toml` like a real one), runs `inhabit agent`'s steps on it against an
endpoint, and answers the apply prompt. The answer is an oracle with noise: the change is accepted
when the task's hidden tests pass (the real grading, `inhabit.grading.grader.grade`, on the
agent's final workspace), and each answer is flipped with probability `noise`. A share of the
population never answers: their sessions are stored without a signal, like an IDE client that
never rates, and the online loop leaves them in the pool. A session that changed nothing has no
prompt in `inhabit agent`; a user who answers rates it with `inhabit online feedback ID bad` (good when
the answer is flipped), so every answering user gives one acceptance trial per session.

The session itself is `inhabit agent`'s own sequence (harness/cli.py `_agent`): the endpoint policy
from `make_policy` (token logprobs requested as the opt-in file says), a sandbox copy of the
repository, `run_episode`, `workspace_changes`, `apply_changes` when accepted and
`record_agent_session` into the store the opt-in file names. Only the terminal prompt is replaced
by the user model, and the policy samples at the simulation's temperature (the agent's default
for an endpoint is greedy, which would give one answer per task and nothing to learn from).
"""

from __future__ import annotations

import random
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from inhabit.online.store import SessionStore


@dataclass(frozen=True)
class SimUser:
    """One member of the population; `silent` users never answer."""

    id: int
    silent: bool


def population(n: int, silent: float, rng: random.Random) -> list[SimUser]:
    """`n` users of whom round(silent * n) never answer (which ones: drawn by `rng`)."""
    quiet = set(rng.sample(range(n), round(silent * n)))
    return [SimUser(i, i in quiet) for i in range(n)]


def answer(user: SimUser, passed: bool, noise: float, rng: random.Random) -> tuple[bool | None, bool]:
    """(the user's verdict, whether it was flipped); verdict None: the user never answers.

    The random draw is made for silent users too, so the noise of other users' answers does not
    depend on who is silent."""
    flip = rng.random() < noise
    if user.silent:
        return None, False
    return passed != flip, flip


@dataclass(frozen=True)
class SessionOutcome:
    """What one simulated session did: the ground truth beside what the user said."""

    index: int
    user: int
    task_id: str
    session_id: str | None
    version: int | None
    """Newest policy version among the session's tokens (the version the store credits)."""
    status: str
    passed: bool
    """The hidden tests pass on the agent's final workspace (noise-free)."""
    changed: bool
    decision: str
    """accepted, rejected, no_changes or unanswered (what `inhabit agent` would record)."""
    verdict: bool | None
    flipped: bool
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def opt_in(repo: Path, store: Path) -> None:
    """What a user does once per repository: `.inhabit/online.toml` naming the deployment's store."""
    (repo / ".inhabit").mkdir(parents=True, exist_ok=True)
    (repo / ".inhabit" / "online.toml").write_text(f'enabled = true\nstore = "{store}"\nlogprobs = true\n')


async def run_session(
    index: int,
    user: SimUser,
    task: Any,
    repo: Path,
    *,
    store: Path,
    endpoint: str,
    model_name: str,
    provider: Any,
    harness: Any,
    temperature: float,
    noise: float,
    rng: random.Random,
    context_window: int,
) -> SessionOutcome:
    """One `inhabit agent` session of `user` on `task` in `repo`, a fresh copy of its workspace that
    the user opted in to the deployment's session store `store`."""
    from inhabit.grading.grader import grade
    from inhabit.harness.agent import apply_changes, workspace_changes
    from inhabit.harness.loop import run_episode
    from inhabit.inference.policies import make_policy
    from inhabit.online.config import repo_opt_in
    from inhabit.online.record import record_agent_session

    shutil.copytree(task.workspace_dir, repo)
    opt_in(repo, store)
    online = repo_opt_in(repo)
    assert online is not None
    # A user's harness config names its project's test command (run_tests), as a real one would.
    cfg = harness.model_copy(update={"test_command": task.grading.command if task.grading else None})
    policy = make_policy(
        endpoint,
        model_name=model_name,
        context_window=context_window,
        temperature=temperature,
        logprobs=online.logprobs,
    )
    passed, error = False, None
    try:
        sandbox = await provider.create(repo)
        try:
            traj = await run_episode(
                policy, sandbox, task.instruction, config=cfg, task_id=f"agent:{repo.name}"
            )
            changes = await workspace_changes(repo, sandbox)
            # The oracle half of the user: the real grading of the final workspace (hidden tests).
            try:
                result = await grade(task, sandbox, provider)
                passed = float(result.reward) >= 1.0
            except Exception as e:  # a grading failure is the user's "it does not work"
                error = f"grading: {type(e).__name__}: {e}"
        finally:
            await sandbox.close()
    finally:
        await policy.close()
    verdict, flipped = answer(user, passed, noise, rng)
    if verdict is None:
        decision = "unanswered"
    elif not changes:
        decision = "no_changes"
    else:
        decision = "accepted" if verdict else "rejected"
    if decision == "accepted":
        apply_changes(repo, changes)
    # "unanswered" is no decision `record_agent_session` knows: stored with no signal at all.
    sid = record_agent_session(online.store_path(), repo, traj, changes, decision, model=endpoint)
    if decision == "no_changes":  # nothing to apply: the answering user rates the session instead
        store = SessionStore(online.store_path())
        try:
            store.add_signal(sid, "rating", 1.0 if verdict else -1.0)
        finally:
            store.close()
    versions = [v for s in traj.segments for t in s.turns for v in (t.versions or []) if v >= 0]
    return SessionOutcome(
        index=index,
        user=user.id,
        task_id=task.id,
        session_id=sid,
        version=max(versions) if versions else None,
        status=traj.status,
        passed=passed,
        changed=bool(changes),
        decision=decision,
        verdict=verdict,
        flipped=flipped,
        error=error or traj.error,
    )
