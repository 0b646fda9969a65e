"""`inhabit sandbox` commands and the demo that `inhabit quickstart` runs."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.sandbox.demo import run_demo


def test_doctor_reports_backend_and_limits():
    result = CliRunner().invoke(app, ["sandbox", "doctor"])
    assert result.exit_code == 0, result.output
    assert "default backend" in result.output and "limits" in result.output


def test_run_command_returns_the_exit_code(tmp_path: Path):
    (tmp_path / "a.py").write_text("import sys; print('hi'); sys.exit(3)\n")
    result = CliRunner().invoke(app, ["sandbox", "run", str(tmp_path), "--", "python3", "a.py"])
    assert result.exit_code == 3
    assert "hi" in result.output


async def test_demo_shows_fix_restore_and_isolation(capsys):
    await run_demo()
    out = capsys.readouterr().out
    assert "1 failed, 1 passed" in out and "2 passed" in out
    assert "return a + b" in out  # restored to the snapshot, not the broken write
    assert "refused" in out  # no connection to the host's loopback
    assert "not visible" in out and "READABLE" not in out  # the host file is not visible
