"""The session store: one SQLite file in WAL mode holding sessions, signals and the cycle ledger.

    sessions     one row per `inhabit agent` session or `inhabit serve` conversation: repository id
                 (a hash, never a path), the redacted session record as JSON with its sha256, the
                 newest policy version among its turns
    serve_turns  the turns of `inhabit serve` conversations, appended one request at a time
    signals      {kind, value, at, note, source} per session
    cycles       one row per cycle of `inhabit online`: the version it made, its parent, its
                 sessions, gate result, train figures, live figures, status
    used         the ledger that makes training exactly-once: a session appears here at most once,
                 with the cycle that consumed it (trained, or dropped as stale / corrupt / untrainable)

Every write is one short `BEGIN IMMEDIATE` transaction, and readers never block writers (WAL), so
any number of agents and servers may write at once; SQLite serializes them (busy timeout 30 s).
A record whose JSON does not parse or whose checksum does not match (a truncated write by another
tool, a disk fault) raises `CorruptSession` on read; the harvest skips and counts it.

The store redacts secrets (redact.py) before any record, turn or note reaches the file.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from inhabit.errors import OnlineError
from inhabit.online.redact import redact_text, redact_trajectory, redact_value
from inhabit.online.rewards import Signal

SCHEMA = """
CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    repo_id TEXT,
    source TEXT NOT NULL,
    model TEXT,
    created_at REAL NOT NULL,
    version INTEGER,
    redactions INTEGER NOT NULL DEFAULT 0,
    record TEXT,
    sha256 TEXT
);
CREATE TABLE IF NOT EXISTS serve_turns (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    at REAL NOT NULL,
    turn TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS serve_turns_session ON serve_turns(session_id, seq);
CREATE TABLE IF NOT EXISTS signals (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    value REAL NOT NULL,
    at REAL NOT NULL,
    note TEXT,
    source TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS signals_session ON signals(session_id);
CREATE TABLE IF NOT EXISTS cycles (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    version INTEGER,
    parent INTEGER,
    status TEXT NOT NULL,
    started_at REAL NOT NULL,
    finished_at REAL,
    sessions TEXT NOT NULL DEFAULT '[]',
    gate TEXT,
    train TEXT,
    live TEXT,
    note TEXT
);
CREATE TABLE IF NOT EXISTS used (
    session_id TEXT PRIMARY KEY,
    cycle INTEGER NOT NULL,
    status TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

SIGNAL_KINDS = ("accepted", "rejected", "rating", "kept", "reverted", "tests_passed")
"""Kinds inhabit itself records; any other kind is accepted too (the reward table may map it)."""

LIVE_STATUSES = ("published", "rollback")
"""Cycle statuses whose version was served (the deployed version is the newest of them)."""


class UnknownSession(OnlineError):
    """Feedback or a lookup named a session the store does not hold."""


class CorruptSession(OnlineError):
    """A stored record does not parse or fails its checksum."""


@dataclass
class SessionRow:
    """One session as stored (record parsed lazily by `SessionStore.record`)."""

    id: str
    repo_id: str | None
    source: str
    model: str | None
    created_at: float
    version: int | None
    redactions: int
    signals: list[Signal] = field(default_factory=list)


@dataclass
class CycleRow:
    id: int
    version: int | None
    parent: int | None
    status: str
    started_at: float
    finished_at: float | None
    sessions: list[str]
    gate: dict[str, Any] | None
    train: dict[str, Any] | None
    live: dict[str, Any] | None
    note: str | None


def repo_id_of(repo: Path) -> str:
    """A stable id for a repository that never reveals its path: sha256 of the resolved path."""
    return hashlib.sha256(str(Path(repo).resolve()).encode()).hexdigest()[:16]


def new_session_id() -> str:
    return uuid.uuid4().hex[:16]


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _versions_of(turns: list[dict[str, Any]]) -> int | None:
    vs = [v for t in turns for v in (t.get("versions") or []) if v is not None and v >= 0]
    return max(vs) if vs else None


class SessionStore:
    """The store at `path` (created with its schema on first use; WAL mode)."""

    def __init__(self, path: str | Path, *, create: bool = True, busy_timeout_s: float = 30.0) -> None:
        self.path = Path(path).expanduser()
        if not self.path.exists():
            if not create:
                raise OnlineError(
                    f"no session store at {self.path}; record a session first (opt in with "
                    ".inhabit/online.toml) or pass --store"
                )
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(
            self.path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=False
        )
        self._db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        self._set_wal(busy_timeout_s)
        self._db.execute("PRAGMA synchronous = NORMAL")
        with self._tx() as c:
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    c.execute(stmt)

    def _set_wal(self, timeout_s: float) -> None:
        """WAL mode, retried: two processes converting a new store at once both hold a shared lock
        and want an exclusive one, and SQLite answers one of them "database is locked" at once
        (a deadlock it will not wait out), not after the busy timeout."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(0.02)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken at once (BEGIN IMMEDIATE) so it never fails half-way."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def _query(self, sql: str, args: tuple = ()) -> list[tuple]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    # ------------------------------------------------------------------ sessions

    def add_session(
        self,
        trajectory: dict[str, Any],
        *,
        source: str = "agent",
        repo_id: str | None = None,
        model: str | None = None,
        extra: dict[str, Any] | None = None,
        session_id: str | None = None,
        signals: Sequence[tuple[str, float]] = (),
    ) -> str:
        """Store one finished session (its trajectory record as JSON, redacted here) and its first
        signals (e.g. the accept/reject of `inhabit agent`), in one transaction; returns its id."""
        sid = session_id or new_session_id()
        traj, n = redact_trajectory(trajectory)
        extra_r, n2 = redact_value(extra or {})
        turns = [t for s in traj.get("segments", []) for t in s.get("turns", [])]
        record = json.dumps(
            {
                "format": 1,
                "session_id": sid,
                "repo_id": repo_id,
                "trajectory": traj,
                "turn_versions": [t.get("versions") for t in turns],
                **extra_r,
            }
        )
        now = time.time()
        with self._tx() as c:
            c.execute(
                "INSERT INTO sessions (id, repo_id, source, model, created_at, version, redactions, record, "
                "sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (sid, repo_id, source, model, now, _versions_of(turns), n + n2, record, _sha(record)),
            )
            for kind, value in signals:
                c.execute(
                    "INSERT INTO signals (session_id, kind, value, at, source) VALUES (?, ?, ?, ?, ?)",
                    (sid, kind, float(value), now, source),
                )
        return sid

    def append_turn(
        self,
        session_id: str,
        turn: dict[str, Any],
        messages: list[dict[str, Any]],
        *,
        model: str | None = None,
        source: str = "serve",
    ) -> int:
        """Add one request's turn (and the messages it answered) to a served conversation, creating
        the session on its first turn. A turn with a redaction loses its token data. Returns the
        redactions made."""
        redacted, n = redact_value({"turn": turn, "messages": messages})
        if n:
            for f in (
                "prompt_token_ids",
                "completion_token_ids",
                "logprobs",
                "routed_experts",
                "prompt_routed_experts",
            ):
                redacted["turn"][f] = None
        body = json.dumps(redacted)
        now = time.time()
        version = _versions_of([redacted["turn"]])
        with self._tx() as c:
            c.execute(
                "INSERT OR IGNORE INTO sessions (id, source, model, created_at, redactions) VALUES (?, ?, ?, ?, 0)",
                (session_id, source, model, now),
            )
            c.execute(
                "UPDATE sessions SET redactions = redactions + ?, version = MAX(COALESCE(version, -1), ?) "
                "WHERE id = ?",
                (n, -1 if version is None else version, session_id),
            )
            c.execute(
                "INSERT INTO serve_turns (session_id, at, turn) VALUES (?, ?, ?)", (session_id, now, body)
            )
        return n

    def exists(self, session_id: str) -> bool:
        return bool(self._query("SELECT 1 FROM sessions WHERE id = ?", (session_id,)))

    def resolve(self, prefix: str) -> str:
        """The full id of the session `prefix` names (a unique prefix of at least 6 characters)."""
        if self.exists(prefix):
            return prefix
        rows = self._query(
            "SELECT id FROM sessions WHERE id LIKE ? LIMIT 2", (prefix.replace("%", "") + "%",)
        )
        if len(prefix) >= 6 and len(rows) == 1:
            return rows[0][0]
        if len(rows) > 1 and len(prefix) >= 6:
            raise UnknownSession(f"{prefix!r} names more than one session; give more characters")
        raise UnknownSession(
            f"no session {prefix!r} in {self.path}; `inhabit online sessions --store {self.path}` lists them"
        )

    def add_signal(
        self,
        session_id: str,
        kind: str,
        value: float,
        *,
        note: str | None = None,
        at: float | None = None,
        source: str = "user",
    ) -> Signal:
        """Record one signal for a known session (UnknownSession otherwise)."""
        if not kind or not kind.replace("_", "").isalnum():
            raise OnlineError(f"signal kind {kind!r} must be letters, digits and underscores")
        sid = self.resolve(session_id)
        note_r = redact_text(note)[0] if note else None
        at = time.time() if at is None else at
        with self._tx() as c:
            c.execute(
                "INSERT INTO signals (session_id, kind, value, at, note, source) VALUES (?, ?, ?, ?, ?, ?)",
                (sid, kind, float(value), at, note_r, source),
            )
        return Signal(kind, float(value), at, note_r, source)

    def signals(self, session_id: str) -> list[Signal]:
        rows = self._query(
            "SELECT kind, value, at, note, source FROM signals WHERE session_id = ? ORDER BY at, id",
            (session_id,),
        )
        return [Signal(*r) for r in rows]

    def _row(self, r: tuple) -> SessionRow:
        return SessionRow(
            id=r[0],
            repo_id=r[1],
            source=r[2],
            model=r[3],
            created_at=r[4],
            version=None if r[5] is None or r[5] < 0 else r[5],
            redactions=r[6],
        )

    def sessions(self, *, repo_id: str | None = None, limit: int | None = None) -> list[SessionRow]:
        """Sessions with their signals, oldest first."""
        sql = "SELECT id, repo_id, source, model, created_at, version, redactions FROM sessions"
        args: tuple = ()
        if repo_id is not None:
            sql, args = sql + " WHERE repo_id = ?", (repo_id,)
        sql += " ORDER BY created_at, id" + (f" LIMIT {int(limit)}" if limit else "")
        rows = [self._row(r) for r in self._query(sql, args)]
        by_id = {r.id: r for r in rows}
        for sid, *sig in self._query(
            "SELECT session_id, kind, value, at, note, source FROM signals ORDER BY at, id"
        ):
            if sid in by_id:
                by_id[sid].signals.append(Signal(*sig))
        return rows

    def record(self, session_id: str) -> dict[str, Any]:
        """The session record (see the module docstring); CorruptSession when it cannot be read."""
        rows = self._query("SELECT source, record, sha256, model FROM sessions WHERE id = ?", (session_id,))
        if not rows:
            raise UnknownSession(f"no session {session_id!r} in {self.path}")
        _source, record, sha, model = rows[0]
        if record is None:
            return self._served_record(session_id, model)
        if sha != _sha(record):
            raise CorruptSession(
                f"session {session_id}: the record fails its checksum (truncated or altered)"
            )
        try:
            out = json.loads(record)
        except json.JSONDecodeError as e:
            raise CorruptSession(f"session {session_id}: the record is not valid JSON ({e})") from None
        if not isinstance(out, dict) or not isinstance(out.get("trajectory"), dict):
            raise CorruptSession(f"session {session_id}: the record has no trajectory")
        return out

    def _served_record(self, session_id: str, model: str | None) -> dict[str, Any]:
        """A served conversation as a trajectory record: one segment, a turn per request."""
        turns, messages = [], []
        for seq, body in self._query(
            "SELECT seq, turn FROM serve_turns WHERE session_id = ? ORDER BY seq", (session_id,)
        ):
            try:
                item = json.loads(body)
                turns.append(item["turn"])
                messages = item["messages"] + [{"role": "assistant", "content": item["turn"].get("text", "")}]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise CorruptSession(f"session {session_id}: turn {seq} does not parse ({e})") from None
        traj = {
            "task_id": f"serve:{session_id}",
            "instruction": next((m.get("content", "") for m in messages if m.get("role") == "user"), ""),
            "status": "finished",
            "segments": [{"index": 0, "messages": messages, "turns": turns}],
            "policy": model or "serve",
        }
        return {
            "format": 1,
            "session_id": session_id,
            "repo_id": None,
            "trajectory": traj,
            "turn_versions": [t.get("versions") for t in turns],
        }

    # ------------------------------------------------------------------ cycles and the ledger

    def state(self, key: str, default: Any = None) -> Any:
        rows = self._query("SELECT value FROM state WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def set_state(self, key: str, value: Any, conn: sqlite3.Connection | None = None) -> None:
        sql = "INSERT INTO state (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value"
        if conn is not None:
            conn.execute(sql, (key, json.dumps(value)))
            return
        with self._tx() as c:
            c.execute(sql, (key, json.dumps(value)))

    def unused_ids(self) -> list[str]:
        """Sessions the ledger has not consumed, oldest first."""
        return [
            r[0]
            for r in self._query(
                "SELECT id FROM sessions WHERE id NOT IN (SELECT session_id FROM used) ORDER BY created_at, id"
            )
        ]

    def used(self) -> dict[str, tuple[int, str]]:
        return {r[0]: (r[1], r[2]) for r in self._query("SELECT session_id, cycle, status FROM used")}

    def start_cycle(
        self,
        version: int | None,
        parent: int | None,
        status: str,
        consumed: dict[str, str],
        train: dict | None = None,
    ) -> int:
        """Open a cycle row and consume its sessions (id -> ledger status) in one transaction."""
        with self._tx() as c:
            cur = c.execute(
                "INSERT INTO cycles (version, parent, status, started_at, sessions, train) VALUES (?, ?, ?, ?, ?, ?)",
                (
                    version,
                    parent,
                    status,
                    time.time(),
                    json.dumps(sorted(k for k, v in consumed.items() if v == "trained")),
                    json.dumps(train),
                ),
            )
            cycle = int(cur.lastrowid)  # type: ignore[arg-type]
            c.executemany(
                "INSERT INTO used (session_id, cycle, status) VALUES (?, ?, ?)",
                [(sid, cycle, st) for sid, st in consumed.items()],
            )
        return cycle

    def update_cycle(self, cycle: int, **fields: Any) -> None:
        self.commit({cycle: fields})

    def commit(self, updates: dict[int, dict[str, Any]], state: dict[str, Any] | None = None) -> None:
        """Update several cycles (id -> fields) and state keys in ONE transaction (a cycle's end)."""
        allowed = {"version", "status", "finished_at", "gate", "train", "live", "note", "parent"}
        with self._tx() as c:
            for cycle, fields in updates.items():
                if not fields.keys() <= allowed:
                    raise ValueError(f"unknown cycle fields {set(fields) - allowed}")
                sets = ", ".join(f"{k} = ?" for k in fields)
                vals = tuple(
                    json.dumps(v) if k in ("gate", "train", "live") else v for k, v in fields.items()
                )
                c.execute(f"UPDATE cycles SET {sets} WHERE id = ?", (*vals, cycle))
            for key, value in (state or {}).items():
                self.set_state(key, value, conn=c)

    def abandon_cycle(self, cycle: int) -> None:
        """Undo a cycle that never published: its row and its sessions' ledger entries go, together."""
        with self._tx() as c:
            c.execute("DELETE FROM used WHERE cycle = ?", (cycle,))
            c.execute("DELETE FROM cycles WHERE id = ?", (cycle,))

    def cycles(self) -> list[CycleRow]:
        rows = self._query(
            "SELECT id, version, parent, status, started_at, finished_at, sessions, gate, train, live, note "
            "FROM cycles ORDER BY id"
        )
        return [
            CycleRow(
                r[0],
                r[1],
                r[2],
                r[3],
                r[4],
                r[5],
                json.loads(r[6]),
                *(json.loads(x) if x else None for x in r[7:10]),
                r[10],
            )
            for r in rows
        ]

    def deployed(self) -> CycleRow | None:
        """The cycle whose version is served now (the newest published or rolled-back-to one)."""
        live = [c for c in self.cycles() if c.status in LIVE_STATUSES and c.version is not None]
        return max(live, key=lambda c: c.version or 0) if live else None
