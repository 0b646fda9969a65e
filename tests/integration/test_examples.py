"""The README tour's first step as a user runs it: the shipped actions file fixes the shipped
example task through the real `inhabit replay` (subprocess, default sandbox backend)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_actions_file_solves_the_example_task():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [
            sys.executable, "-m", "inhabit", "replay",
            "--task", "examples/tasks/demo-001",
            "--actions", "examples/actions/demo-001-fix.json",
            "--json",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["status"] == "finished" and result["flags"] == []
    assert result["reward"] == 1.0
    tools = [step["tool"] for step in result["transcript"]]
    assert tools == ["read_file", "edit_file", "run_tests", "finish"]
