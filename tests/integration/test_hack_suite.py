"""The whole reward-hack suite (bench/hacks.py) through `inhabit replay` on bwrap: every hack earns
0 and every honest fix earns 1 with no flag. The regression gate for any change to grading."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_every_hack_earns_zero_and_every_honest_fix_one(tmp_path):
    from inhabit.sandbox.bwrap import bwrap_problem

    if bwrap_problem():
        pytest.skip(f"bwrap unavailable: {bwrap_problem()}")
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "hacks.py"), "--out", str(tmp_path / "hacks.json")],
        capture_output=True, text=True, timeout=3600,
    )  # fmt: skip
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
