"""`inhabit tasks check` as a user runs it: a real subprocess, the default sandbox backend (bwrap
where it works, else process), the shipped example task."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("group", ["tasks", "task"])  # `task check`: the older spelling, hidden
def test_task_check_cli_on_the_example_task(group):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-m", "inhabit", group, "check", "examples/tasks/demo-001", "--json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout)
    assert report["valid"] and report["after"]["reward"] == 1.0 and report["after"]["flags"] == []
