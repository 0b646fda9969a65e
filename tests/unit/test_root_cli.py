"""The root CLI: starts without heavy imports, reports typed errors as one clean line."""

from __future__ import annotations

import inspect
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


# (new spelling, older spelling kept as a hidden alias)
REGROUPED = [
    (("tasks", "check"), ("task", "check")),
    (("sandbox", "env-server"), ("env-server",)),
    (("online", "feedback"), ("feedback",)),
]


def _resolve(path: tuple[str, ...]):
    from inhabit.cli import command

    cmd = command()
    for name in path:
        cmd = cmd.commands[name]
    return cmd


def test_regrouped_commands_keep_their_older_spelling_hidden():
    from inhabit.cli import command

    root = command()
    for new, old in REGROUPED:
        assert inspect.unwrap(_resolve(new).callback) is inspect.unwrap(_resolve(old).callback), (new, old)
        assert not _resolve(new).hidden
        assert root.commands[old[0]].hidden, f"{old[0]} is listed in `inhabit --help`"
    listed = _inhabit("--help").stdout.split()
    assert "feedback" not in listed and "env-server" not in listed and "task" not in listed
    assert "tasks" in listed and "sandbox" in listed and "online" in listed


def test_both_spellings_run_the_command():
    """Each spelling reaches the command's own checks (a bad value: one line, exit 2)."""
    for new, old in REGROUPED:
        bad = {"check": ["/no/such/task"], "env-server": ["--backend", "nope"], "feedback": ["s", "meh"]}[
            new[-1]
        ]
        lines = []
        for path in (new, old):
            out = _inhabit(*path, *bad)
            assert out.returncode == 2 and "Traceback" not in out.stderr, (path, out.stderr)
            lines.append(out.stderr.replace(" ".join(path), "CMD").replace(path[-1], "CMD"))
        assert lines[0] == lines[1], lines
