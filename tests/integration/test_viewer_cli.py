"""`inhabit view` refuses what it must before serving: a public host without a token, a missing
folder, a folder with no run in it (one line on stderr, exit 2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "recorded-run"


def view(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "inhabit", "view", *args],
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "INHABIT_VIEW_TOKEN": ""},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_a_public_host_needs_a_token():
    p = view(str(EXAMPLE), "--host", "0.0.0.0")
    assert p.returncode == 2
    assert "without a token" in p.stderr and "--token" in p.stderr


def test_a_short_token_is_refused():
    p = view(str(EXAMPLE), "--host", "0.0.0.0", "--token", "abc")
    assert p.returncode == 2 and "at least 8" in p.stderr


def test_folders_without_runs_are_refused(tmp_path: Path):
    p = view(str(tmp_path / "nope"))
    assert p.returncode == 2 and "not a folder" in p.stderr
    p = view(str(tmp_path))
    assert p.returncode == 2 and "no run folder" in p.stderr
