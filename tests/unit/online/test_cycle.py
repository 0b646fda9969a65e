"""`inhabit online`'s cycle on a tiny model: harvest -> train -> gate -> publish -> watch, the ledger
that makes training exactly-once, recovery from a crash at every step, and automatic rollback."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import torch

from inhabit.online.cycle import OnlineLoop
from inhabit.online.store import SessionStore

from .conftest import online_config, synthetic_trajectory

STEPS = ("harvested", "consumed", "trained", "saved", "gated", "publishing", "published")


class Crash(BaseException):
    """Stands for a kill: nothing of the loop catches it and no cleanup of ours runs."""


def rated(store: SessionStore, n: int, *, start: int = 0, version: int = 0) -> list[str]:
    ids = []
    for i in range(start, start + n):
        kind = "accepted" if i % 2 == 0 else "rejected"
        ids.append(store.add_session(synthetic_trajectory(i, version), signals=[(kind, 1.0)]))
    return ids


def check_exactly_once(loop: OnlineLoop, ids: list[str]) -> None:
    cycles = loop.store.cycles()
    assert all(c.status not in ("training", "gating", "publishing", "rolling_back") for c in cycles)
    trained = [sid for c in cycles for sid in c.sessions]
    assert sorted(trained) == sorted(ids)  # each rated session in exactly one finished cycle
    live = [c.version for c in cycles if c.status == "published"]
    assert loop.weights.latest() == max(live)  # nothing published that the log does not know
    assert sorted(loop.weights.versions()) == sorted(live)


def test_a_cycle_consumes_every_kind_of_session_once_and_publishes(tiny_folder, tmp_path: Path) -> None:
    loop = OnlineLoop(online_config(tmp_path, train__max_lag=0))
    assert loop.init(tiny_folder) == 0
    ids = rated(loop.store, 4)
    unrated = loop.store.add_session(synthetic_trajectory(90))
    untrainable = loop.store.add_session(synthetic_trajectory(91, tokens=False), signals=[("accepted", 1.0)])
    corrupt = loop.store.add_session(synthetic_trajectory(92), signals=[("accepted", 1.0)])
    with sqlite3.connect(loop.store.path) as db:
        db.execute("UPDATE sessions SET record = substr(record, 1, 40) WHERE id = ?", (corrupt,))
    row = loop.run_cycle()
    assert row is not None and (row.status, row.version, row.parent) == ("published", 1, 0)
    assert sorted(row.sessions) == sorted(ids)
    assert row.train["counts"] == {
        "trained": 4,
        "stale": 0,
        "corrupt": 1,
        "untrainable": 1,
        "unrated": 1,
        "settling": 0,
    }
    used = loop.store.used()
    assert used[corrupt][1] == "corrupt" and used[untrainable][1] == "untrainable" and unrated not in used
    assert loop.weights.latest() == 1 and loop.store.deployed().version == 1
    # Published weights are the candidate's and differ from version 0's.
    from inhabit.weights.subscribe import Subscriber

    sub = Subscriber(loop.config.weights)
    sub.sync(0)
    v0 = {k: v.clone() for k, v in sub.state_dict().items()}
    sub.sync(1)
    assert any(not torch.equal(v0[k], t) for k, t in sub.state_dict().items())
    # With max_lag 0, sessions of version 0 are now stale; nothing else is due.
    stale = rated(loop.store, 2, start=10, version=0)
    assert loop.run_cycle() is None
    fresh = rated(loop.store, 2, start=20, version=1)
    row = loop.run_cycle()
    assert row.version == 2 and sorted(row.sessions) == sorted(fresh)
    assert all(loop.store.used()[s][1] == "stale" for s in stale)
    assert loop.run_cycle() is None


# A crash before the publish (sessions taken, then given back) and one after it (the cycle is
# completed) are the two recovery paths; every other step is covered in the slow run.
FAST_STEPS = ("consumed", "published")


@pytest.mark.parametrize(
    "step", [s if s in FAST_STEPS else pytest.param(s, marks=pytest.mark.slow) for s in STEPS]
)
def test_a_crash_at_any_step_resumes_without_losing_or_repeating_a_session(
    tiny_folder, tmp_path: Path, step: str
) -> None:
    cfg = online_config(tmp_path)
    setup = OnlineLoop(cfg)
    setup.init(tiny_folder)
    ids = rated(setup.store, 4)
    setup.close()

    def crash(name: str) -> None:
        if name == step:
            raise Crash(name)

    doomed = OnlineLoop(cfg, on_step=crash)
    with pytest.raises(Crash):
        doomed.run_cycle()
    # The process is gone: its connection with it (nothing was mid-transaction).
    doomed.store.close()
    loop = OnlineLoop(cfg)
    more = rated(loop.store, 2, start=4)
    while loop.run_cycle() is not None:
        pass
    check_exactly_once(loop, ids + more)


@pytest.mark.parametrize(
    "crash_at", [None, "rollback_published", pytest.param("rollback_started", marks=pytest.mark.slow)]
)
def test_a_worse_version_is_rolled_back_to_its_parents_weights(
    tiny_folder, tmp_path: Path, crash_at: str | None
) -> None:
    from inhabit.weights.subscribe import Subscriber

    cfg = online_config(tmp_path)

    def crash(name: str) -> None:
        if name == crash_at:
            raise Crash(name)

    loop = OnlineLoop(cfg, on_step=crash)
    loop.init(tiny_folder)
    rated(loop.store, 2)
    assert loop.run_cycle().version == 1
    # Live use: version 0 was accepted 9 times in 10, version 1 once in 10.
    for i in range(10):
        loop.store.add_session(
            synthetic_trajectory(100 + i, 0), signals=[("accepted" if i else "rejected", 1.0)]
        )
        loop.store.add_session(
            synthetic_trajectory(200 + i, 1), signals=[("rejected" if i else "accepted", 1.0)]
        )
    if crash_at is None:
        live = loop.watch()
        assert live["trials"] == 10 and live["diff_ci"][1] < 0
    else:  # killed during the rollback: the next start finishes or redoes it
        with pytest.raises(Crash):
            loop.watch()
        loop.store.close()
        loop = OnlineLoop(cfg)
        loop.recover()
        loop.watch()
    cycles = {c.version: c for c in loop.store.cycles()}
    assert cycles[1].status == "rolled_back" and cycles[2].status == "rollback" and cycles[2].parent == 0
    assert loop.store.deployed().version == 2
    sub = Subscriber(loop.config.weights)
    sub.sync(0)
    v0 = {k: v.clone() for k, v in sub.state_dict().items()}
    sub.sync(2)
    assert all(torch.equal(v0[k], t) for k, t in sub.state_dict().items())


def test_no_rollback_while_the_evidence_is_thin(tiny_folder, tmp_path: Path) -> None:
    loop = OnlineLoop(online_config(tmp_path))
    loop.init(tiny_folder)
    rated(loop.store, 2)
    loop.run_cycle()
    loop.store.add_session(synthetic_trajectory(300, 0), signals=[("accepted", 1.0)])
    loop.store.add_session(synthetic_trajectory(301, 1), signals=[("rejected", 1.0)])
    live = loop.watch()
    assert live["diff_ci"][0] < 0 < live["diff_ci"][1]
    assert loop.store.deployed().version == 1


def test_online_log_and_sessions_show_every_cycle(tiny_folder, tmp_path: Path) -> None:
    import json

    from typer.testing import CliRunner

    from inhabit.cli import app

    loop = OnlineLoop(online_config(tmp_path))
    loop.init(tiny_folder)
    ids = rated(loop.store, 2)
    loop.run_cycle()
    runner = CliRunner()
    out = runner.invoke(app, ["online", "log", "--store", str(loop.store.path), "--json"])
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in out.output.splitlines()]
    assert [(r["version"], r["status"]) for r in rows] == [(0, "published"), (1, "published")]
    assert sorted(rows[1]["sessions"]) == sorted(ids) and rows[1]["train"]["samples"] == 2
    table = runner.invoke(app, ["online", "log", "--store", str(loop.store.path)])
    assert table.exit_code == 0 and "published" in table.output
    listed = runner.invoke(app, ["online", "sessions", "--store", str(loop.store.path)])
    assert listed.exit_code == 0 and "cycle 2 (trained)" in listed.output
