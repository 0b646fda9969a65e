"""The root CLI: starts without heavy imports, reports typed errors as one clean line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from inhabit import __version__
from inhabit.cli import app


def test_version_command():
    result = CliRunner().invoke(app, ["version"])
    assert result.exit_code == 0
    assert result.stdout.strip() == __version__


def test_help_does_not_import_torch():
    code = "import sys; from inhabit.cli import app; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def _inhabit(*args: str) -> subprocess.CompletedProcess[str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    return subprocess.run([sys.executable, "-m", "inhabit", *args], capture_output=True, text=True, env=env)


def test_version_option():
    out = _inhabit("--version")
    assert out.returncode == 0 and out.stdout.strip() == __version__


def test_help_shows_boolean_flags_as_flags():
    out = _inhabit("replay", "--help")
    assert out.returncode == 0
    (json_line,) = [line for line in out.stdout.splitlines() if "--json" in line]
    assert "<bool>" not in out.stdout and "Print one JSON object" in json_line
    assert "<path>" in out.stdout  # options that take a value still show its type


def test_a_usage_error_is_one_line_naming_the_help():
    out = _inhabit("eval", "--samples", "zero", "--tasks", "x", "--model", "y")
    assert out.returncode == 2 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("error: ") and "--samples" in line and "inhabit eval --help" in line
