"""`inhabit agent` in an opted-in repository records its session in the online store (redacted);
`inhabit online feedback` rates it; `inhabit online outcomes` sees whether the change was kept."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_harness_agent import SCRIPT, ScriptedServer, agent

from inhabit.online.store import SessionStore
from inhabit.serving import BackgroundServer

SRC = Path(__file__).resolve().parents[2] / "src"
SECRET = "ghp_" + "0123456789abcdefghijABCDEFGHIJ012345"


def inhabit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inhabit", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC)},
        timeout=120,
    )


@pytest.fixture
def opted_in(tmp_path: Path) -> tuple[Path, Path]:
    repo = tmp_path / "myrepo"
    (repo / ".inhabit").mkdir(parents=True)
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n")
    (repo / "config.ini").write_text(f"token = {SECRET}\n")
    db = tmp_path / "online" / "sessions.db"
    (repo / ".inhabit" / "online.toml").write_text(f'enabled = true\nstore = "{db}"\n')
    return repo, db


def test_an_opted_in_session_is_stored_redacted_rated_and_its_outcome_observed(opted_in) -> None:
    repo, db = opted_in
    script = [SCRIPT[0].replace("calc.py", "config.ini"), *SCRIPT[1:]]
    with BackgroundServer(ScriptedServer(script).app) as server:
        out = agent(repo, f"{server.url}/v1", "--yes")
    assert out.returncode == 0, out.stderr
    # the opt-in file the user wrote is the one thing inhabit keeps in the repository
    assert [p.relative_to(repo).as_posix() for p in (repo / ".inhabit").rglob("*")] == [
        ".inhabit/online.toml"
    ]
    store = SessionStore(db)
    (row,) = store.sessions()
    assert row.source == "agent" and row.redactions >= 1
    assert [(s.kind, s.value) for s in row.signals] == [("accepted", 1.0)]
    record = store.record(row.id)
    assert record["decision"] == "accepted" and record["changed_files"][0]["path"] == "calc.py"
    assert [c["tool"] for c in record["trajectory"]["tool_calls"]] == ["read_file", "edit_file", "finish"]
    assert f"inhabit online feedback {row.id}" in out.stdout
    assert SECRET.encode() not in b"".join(p.read_bytes() for p in db.parent.iterdir())

    rated = inhabit("online", "feedback", row.id[:8], "good", "--note", "nice", "--store", str(db))
    assert rated.returncode == 0, rated.stderr
    unknown = inhabit("feedback", "nosuchsession", "good", "--store", str(db))  # the older spelling
    assert unknown.returncode == 2 and "error: no session 'nosuchsession'" in unknown.stderr
    assert "Traceback" not in unknown.stderr

    # The user reverts the change; outcomes (run from the repository, store from its opt-in) sees it.
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n")
    seen = inhabit("online", "outcomes", "--repo", str(repo), "--test-command", "exit 3")
    assert seen.returncode == 0, seen.stderr
    assert '"reverted": 1' in seen.stdout and '"tests_passed": 1' in seen.stdout
    kinds = {(s.kind, s.value) for s in store.signals(row.id)}
    assert kinds == {("accepted", 1.0), ("rating", 1.0), ("reverted", 1.0), ("tests_passed", -1.0)}


@pytest.mark.slow
def test_a_repository_that_did_not_opt_in_records_nothing(tmp_path: Path, monkeypatch) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n")
    monkeypatch.setenv("INHABIT_ONLINE_STORE", str(tmp_path / "never.db"))
    with BackgroundServer(ScriptedServer(SCRIPT).app) as server:
        out = agent(repo, f"{server.url}/v1", "--yes")
    assert out.returncode == 0, out.stderr
    assert not (tmp_path / "never.db").exists() and "online:" not in out.stdout
