"""The root CLI: starts without heavy imports, reports typed errors as one clean line."""

from __future__ import annotations

import subprocess
import sys

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
