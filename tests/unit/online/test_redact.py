"""Secrets never reach the session store: patterns, nested records, token data of affected segments."""

from __future__ import annotations

import sqlite3

import pytest

from inhabit.online.redact import redact_text, redact_trajectory
from inhabit.online.store import SessionStore

SECRETS = {
    "openai": "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4",
    "anthropic": "sk-ant-api03-" + "abcdefghijklmnopqrstuvwxyz012345",
    "github": "ghp_" + "0123456789abcdefghijABCDEFGHIJ012345",
    "aws": "AKIA" + "ABCDEFGHIJKLMNOP",
    "slack": "xoxb-" + "1234567890-abcdefghij",
    "google": "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "hf": "hf_" + "abcdefghijklmnopqrstuvwxyzABCDEF",
    "jwt": "eyJhbGciOiJIUzI1NiJ9." + "eyJzdWIiOiIxMjM0NTY3ODkwIn0.abcdefghijKLMNOP",
}
PRIVATE_KEY = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAabc\nQWERTY123\n-----END RSA PRIVATE KEY-----"


@pytest.mark.parametrize("name", sorted(SECRETS))
def test_each_known_credential_format_is_redacted(name: str) -> None:
    text, n = redact_text(f"config: {SECRETS[name]} (do not share)")
    assert SECRETS[name] not in text and n >= 1
    assert "[REDACTED:" in text and text.startswith("config: ") and text.endswith("(do not share)")


def test_private_keys_assignments_bearer_and_url_passwords() -> None:
    text, n = redact_text(
        f"{PRIVATE_KEY}\nDB_PASSWORD = 'hunter2hunter2'\n"
        "curl -H 'Authorization: Bearer abcdef0123456789abcdef'\n"
        "url = postgres://admin:s3cr3tpass@db.internal:5432/app\napi_key: zzzzzzzzzzzz"
    )
    for leaked in (
        "MIIEowIBAAKCAQEA",
        "hunter2hunter2",
        "abcdef0123456789abcdef",
        "s3cr3tpass",
        "zzzzzzzzzzzz",
    ):
        assert leaked not in text
    assert n == 5
    assert "postgres://admin:[REDACTED:password]@db.internal" in text


def test_ordinary_code_is_left_alone() -> None:
    code = "def add(a, b):\n    max_tokens = 512\n    return a + b  # token count\n"
    assert redact_text(code) == (code, 0)


def _traj(secret_in: str) -> dict:
    clean_seg = {
        "index": 0,
        "messages": [{"role": "user", "content": "fix calc.py"}],
        "turns": [
            {"text": "ok", "prompt_token_ids": [1, 2], "completion_token_ids": [3], "logprobs": [-0.1]}
        ],
    }
    dirty_seg = {
        "index": 1,
        "messages": [{"role": "tool", "content": f"OPENAI_API_KEY={SECRETS['openai']}"}],
        "turns": [
            {"text": "done", "prompt_token_ids": [4, 5], "completion_token_ids": [6], "logprobs": [-0.2]}
        ],
    }
    return {
        "task_id": "t",
        "instruction": secret_in,
        "status": "finished",
        "segments": [clean_seg, dirty_seg],
    }


def test_a_segment_that_held_a_secret_loses_its_token_data_the_others_keep_it() -> None:
    out, n = redact_trajectory(_traj("nothing secret"))
    assert n == 1
    assert out["segments"][0]["turns"][0]["completion_token_ids"] == [3]
    dirty = out["segments"][1]["turns"][0]
    assert (
        dirty["prompt_token_ids"] is None
        and dirty["completion_token_ids"] is None
        and dirty["logprobs"] is None
    )
    assert SECRETS["openai"] not in str(out)


def test_the_store_file_never_holds_a_secret(tmp_path) -> None:
    store = SessionStore(tmp_path / "s.db")
    sid = store.add_session(
        _traj(f"use token {SECRETS['github']}"), extra={"diff": f"+KEY = '{SECRETS['aws']}'\n{PRIVATE_KEY}"}
    )
    store.add_signal(sid, "rating", 1.0, note=f"leaked {SECRETS['slack']} oops")
    store.append_turn(
        "served-1", {"text": SECRETS["hf"], "completion_token_ids": [1]}, [{"role": "user", "content": "hi"}]
    )
    store.close()
    # Every byte of the database and its WAL, not just what the API returns.
    raw = b"".join(p.read_bytes() for p in tmp_path.iterdir())
    for secret in (*SECRETS.values(), "MIIEowIBAAKCAQEA"):
        assert secret.encode() not in raw, secret
    with sqlite3.connect(tmp_path / "s.db") as db:
        (redactions,) = db.execute("SELECT redactions FROM sessions WHERE id = ?", (sid,)).fetchone()
    assert redactions >= 3
