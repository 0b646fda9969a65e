"""The session store: sessions and signals round-trip, bad input is a clear error or a counted skip,
and two processes writing at once lose nothing."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from inhabit.online.config import RewardConfig
from inhabit.online.rewards import accepted_of, reward_of
from inhabit.online.store import CorruptSession, SessionStore, UnknownSession

SRC = Path(__file__).resolve().parents[3] / "src"


def traj(versions: list[int] | None = None) -> dict:
    turn = {
        "text": "hi",
        "prompt_token_ids": [1, 2],
        "completion_token_ids": [3, 4],
        "logprobs": [-0.5, -0.1],
        "versions": versions,
    }
    return {
        "task_id": "agent:r",
        "instruction": "fix it",
        "status": "finished",
        "segments": [{"index": 0, "messages": [], "turns": [turn]}],
    }


def test_session_and_signals_round_trip(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "s.db")
    sid = store.add_session(traj([3, 4]), repo_id="abc", model="m", signals=[("accepted", 1.0)])
    store.add_signal(sid, "rating", -1.0, note="wrong file")
    (row,) = store.sessions()
    assert (row.id, row.repo_id, row.source, row.version) == (sid, "abc", "agent", 4)
    assert [(s.kind, s.value) for s in row.signals] == [("accepted", 1.0), ("rating", -1.0)]
    record = store.record(sid)
    assert record["turn_versions"] == [[3, 4]] and record["trajectory"]["segments"][0]["turns"][0][
        "logprobs"
    ] == [-0.5, -0.1]
    assert store.resolve(sid[:8]) == sid
    with sqlite3.connect(tmp_path / "s.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_feedback_for_an_unknown_session_is_a_clear_error(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "s.db")
    with pytest.raises(UnknownSession, match=r"no session 'deadbeef'.*inhabit online sessions"):
        store.add_signal("deadbeef", "rating", 1.0)
    with pytest.raises(UnknownSession):
        store.record("deadbeef")


def test_a_corrupt_or_truncated_record_raises_corrupt_session(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "s.db")
    good = store.add_session(traj([0]))
    cut = store.add_session(traj([0]))
    bent = store.add_session(traj([0]))
    with sqlite3.connect(tmp_path / "s.db") as db:
        (text,) = db.execute("SELECT record FROM sessions WHERE id = ?", (cut,)).fetchone()
        db.execute("UPDATE sessions SET record = ? WHERE id = ?", (text[: len(text) // 2], cut))
        db.execute("UPDATE sessions SET record = ?, sha256 = ? WHERE id = ?", ("{not json", "x", bent))
    store.record(good)
    for sid in (cut, bent):
        with pytest.raises(CorruptSession):
            store.record(sid)


def test_served_turns_assemble_into_one_segment(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "s.db")
    msgs = [{"role": "user", "content": "write add"}]
    store.append_turn(
        "conv-1", {"text": "a", "completion_token_ids": [5], "logprobs": [-1.0], "versions": [2]}, msgs
    )
    store.append_turn(
        "conv-1",
        {"text": "b", "completion_token_ids": [6], "logprobs": [-2.0], "versions": [3]},
        [*msgs, {"role": "assistant", "content": "a"}, {"role": "user", "content": "more"}],
    )
    (row,) = store.sessions()
    assert row.source == "serve" and row.version == 3
    seg = store.record("conv-1")["trajectory"]["segments"][0]
    assert [t["text"] for t in seg["turns"]] == ["a", "b"]
    assert [m["content"] for m in seg["messages"]] == ["write add", "a", "more", "b"]


def test_rewards_follow_the_table_and_the_newest_signal_of_a_kind() -> None:
    from inhabit.online.rewards import Signal

    cfg = RewardConfig()
    assert reward_of([], cfg) is None and accepted_of([], cfg) is None
    assert reward_of([Signal("accepted", 1.0, 1)], cfg) == 1.0
    assert reward_of([Signal("accepted", 1.0, 1), Signal("reverted", 1.0, 2)], cfg) == 0.0
    assert reward_of([Signal("rating", 1.0, 1), Signal("rating", -1.0, 2)], cfg) == -1.0
    assert reward_of([Signal("my_kind", 1.0, 1)], cfg) is None
    assert reward_of([Signal("my_kind", 1.0, 1)], RewardConfig(weights={"my_kind": 0.3})) == pytest.approx(
        0.3
    )
    assert accepted_of([Signal("rating", -1.0, 1)], cfg) is False
    assert accepted_of([Signal("rejected", 1.0, 1), Signal("rating", 1.0, 2)], cfg) is False


WRITER = """
import sys
from inhabit.online.store import SessionStore
store = SessionStore(sys.argv[1])
for i in range(int(sys.argv[3])):
    sid = store.add_session({"task_id": "t", "instruction": sys.argv[2], "status": "finished", "segments": []},
                            signals=[("accepted", 1.0)])
    store.add_signal(sid, "rating", 1.0)
    store.append_turn(sys.argv[2] + "-conv", {"text": str(i)}, [])
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path: Path) -> None:
    db, n = tmp_path / "s.db", 60
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(db), name, str(n)], env=env, stderr=subprocess.PIPE, text=True
        )
        for name in ("a", "b")
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read() if p.stderr else ""
    store = SessionStore(db)
    rows = store.sessions()
    agent_rows = [r for r in rows if r.source == "agent"]
    assert len(agent_rows) == 2 * n
    assert (
        sorted(store.record(r.id)["trajectory"]["instruction"] for r in agent_rows) == ["a"] * n + ["b"] * n
    )
    assert all(sorted(s.kind for s in r.signals) == ["accepted", "rating"] for r in agent_rows)
    for name in ("a", "b"):
        turns = store.record(f"{name}-conv")["trajectory"]["segments"][0]["turns"]
        assert [t["text"] for t in turns] == [str(i) for i in range(n)]
