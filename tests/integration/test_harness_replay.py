"""`inhabit replay` end to end: a real task directory, the real CLI, sandbox, harness and grading."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"
# process by default; INHABIT_HARNESS_TEST_BACKEND=bwrap runs the same tests isolated.
BACKEND = os.environ.get("INHABIT_HARNESS_TEST_BACKEND", "process")


def make_task(root: Path) -> Path:
    ws = root / "workspace"
    (ws / "tests").mkdir(parents=True)
    (ws / "shapes.py").write_text(
        "def area(w, h):\n    return w + h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
    )
    (ws / "tests" / "test_shapes.py").write_text(
        "from shapes import area, perimeter\n\n\ndef test_area():\n    assert area(2, 3) == 6\n\n\n"
        "def test_perimeter():\n    assert perimeter(2, 3) == 10\n"
    )
    (root / "hidden" / "tests").mkdir(parents=True)
    (root / "hidden" / "tests" / "test_more.py").write_text(
        "from shapes import area\n\n\ndef test_area_square():\n    assert area(4, 4) == 16\n"
    )
    (root / "task.toml").write_text(
        textwrap.dedent(
            """\
            id = "shapes-001"
            instruction = "tests/test_shapes.py::test_area fails. Fix shapes.py."
            [grading]
            command = "python -m pytest -q -p no:cacheprovider"
            fail_to_pass = ["tests/test_shapes.py::test_area", "tests/test_more.py::test_area_square"]
            pass_to_pass = ["tests/test_shapes.py::test_perimeter"]
            timeout_s = 120
            """
        )
    )
    return root


def replay(task: Path, actions: object, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "actions.json"
    path.write_text(json.dumps(actions))
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "inhabit",
            "replay",
            "--task",
            str(task),
            "--actions",
            str(path),
            "--sandbox",
            BACKEND,
            *extra,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


FIX = {"tool": "edit_file", "args": {"path": "shapes.py", "old": "return w + h", "new": "return w * h"}}


@pytest.fixture
def task(tmp_path: Path) -> Path:
    return make_task(tmp_path / "task")


def test_replay_of_a_correct_fix_earns_1_with_no_flags(task: Path, tmp_path: Path) -> None:
    actions = [
        [{"tool": "read_file", "args": {"path": "shapes.py"}}, {"tool": "list_dir", "args": {}}],
        [FIX],
        [{"tool": "run_tests", "args": {"selector": "tests/test_shapes.py"}}],
    ]
    out = replay(task, actions, tmp_path, "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)  # stdout is exactly one JSON object
    assert report["reward"] == 1 and report["flags"] == [] and report["status"] == "finished"
    tools = [c["tool"] for c in report["transcript"]]
    assert tools == ["read_file", "list_dir", "edit_file", "run_tests", "finish"]
    assert "2 passed" in report["transcript"][3]["observation"]
    assert "test_more.py" not in report["transcript"][1]["observation"]  # hidden tests are never visible
    assert report["transcript"][2]["args"] == FIX["args"]


def test_wrong_fix_earns_0_and_a_cheat_earns_0_with_its_flag(task: Path, tmp_path: Path) -> None:
    wrong = [
        [{"tool": "edit_file", "args": {"path": "shapes.py", "old": "return w + h", "new": "return w - h"}}]
    ]
    report = json.loads(replay(task, wrong, tmp_path, "--json").stdout)
    assert report["reward"] == 0 and report["flags"] == []

    cheat = [
        [
            {
                "tool": "write_file",
                "args": {"path": "tests/test_shapes.py", "content": "def test_area():\n    pass\n"},
            },
            {"tool": "write_file", "args": {"path": "conftest.py", "content": "import pytest\n"}},
        ]
    ]
    report = json.loads(replay(task, cheat, tmp_path, "--json").stdout)
    assert report["reward"] == 0
    assert "test_file_modified" in report["flags"] and "conftest_changed" in report["flags"]


def test_malformed_calls_are_observations_and_a_bad_actions_file_is_a_clean_error(
    task: Path, tmp_path: Path
) -> None:
    actions = [[{"tool": "teleport", "args": {}}, {"tool": "read_file", "args": {"start_line": "x"}}], [FIX]]
    report = json.loads(replay(task, actions, tmp_path, "--json").stdout)
    assert report["reward"] == 1
    assert report["transcript"][0]["error"] and "unknown tool" in report["transcript"][0]["observation"]
    assert report["transcript"][1]["error"] and "missing <path>" in report["transcript"][1]["observation"]

    out = replay(task, {"not": "a list"}, tmp_path, "--json")
    assert out.returncode == 2 and "expected a JSON list of turns" in out.stderr and out.stdout == ""


def test_readable_report_without_json(task: Path, tmp_path: Path) -> None:
    out = replay(task, [[FIX]], tmp_path)
    assert out.returncode == 0, out.stderr
    assert "reward: 1.0" in out.stdout and "flags: none" in out.stdout
