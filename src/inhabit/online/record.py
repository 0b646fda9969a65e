"""What `inhabit agent` records in the session store, and outcomes observed later in the repository.

An opted-in session (`.inhabit/online.toml`) is stored with its trajectory, diff, and a digest of
every changed file before and after, plus its first signal (accepted or rejected; a session that
changed nothing has none). `observe_outcomes` (`inhabit online outcomes --repo PATH`, e.g. from a
git hook or a nightly job) later compares the repository with those digests: a change whose files
are all back to their old content was `reverted`, any other accepted change was `kept`; with a
test command it also records `tests_passed` (+1 passed, -1 failed) once per session.
"""

from __future__ import annotations

import hashlib
import subprocess
import time
from pathlib import Path
from typing import Any

from inhabit.online.store import SessionStore, repo_id_of


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def record_agent_session(
    store_path: Path, repo: Path, traj: Any, changes: list[Any], decision: str, *, model: str
) -> str:
    """Store one `inhabit agent` session; returns its id."""
    from inhabit.harness.agent import render_diff

    signals = {"accepted": [("accepted", 1.0)], "rejected": [("rejected", 1.0)]}.get(decision, [])
    extra = {
        "decision": decision,
        "diff": render_diff(changes),
        "changed_files": [
            {"path": c.path, "kind": c.kind, "before": _digest(c.before), "after": _digest(c.after)}
            for c in changes
        ],
    }
    store = SessionStore(store_path)
    try:
        return store.add_session(
            traj.model_dump(mode="json"),
            source="agent",
            repo_id=repo_id_of(repo),
            model=model,
            extra=extra,
            signals=signals,
        )
    finally:
        store.close()


def _current(repo: Path, rel: str) -> str | None:
    path = repo / rel
    return _digest(path.read_bytes()) if path.is_file() else None


def observe_outcomes(
    store: SessionStore,
    repo: Path,
    *,
    test_command: str | None = None,
    min_age_s: float = 0.0,
    timeout_s: float = 600.0,
) -> dict[str, int]:
    """Record kept/reverted (and tests_passed) for this repository's accepted sessions that lack them."""
    from inhabit.online.store import CorruptSession

    counts = {"kept": 0, "reverted": 0, "tests_passed": 0, "skipped": 0}
    now = time.time()
    todo = []
    for row in store.sessions(repo_id=repo_id_of(repo)):
        kinds = {s.kind for s in row.signals}
        if "accepted" not in kinds or now - row.created_at < min_age_s:
            continue
        try:
            record = store.record(row.id)
        except CorruptSession:
            counts["skipped"] += 1
            continue
        todo.append((row, kinds, record))
    tests: float | None = None
    if test_command and any("tests_passed" not in k for _, k, _ in todo):
        try:
            done = subprocess.run(test_command, shell=True, cwd=repo, capture_output=True, timeout=timeout_s)
            tests = 1.0 if done.returncode == 0 else -1.0
        except subprocess.TimeoutExpired:
            tests = -1.0
    for row, kinds, record in todo:
        files = record.get("changed_files") or []
        if files and not kinds & {"kept", "reverted"}:
            back = all(_current(repo, f["path"]) == f["before"] for f in files)
            kind = "reverted" if back else "kept"
            store.add_signal(row.id, kind, 1.0, source="repo")
            counts[kind] += 1
        if tests is not None and "tests_passed" not in kinds:
            store.add_signal(row.id, "tests_passed", tests, source="repo")
            counts["tests_passed"] += 1
    return counts
