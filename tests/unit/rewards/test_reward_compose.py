"""Reward parts without judges: tests alone, lint delta with real ruff, diff size, gating, and
changes read from a real sandbox."""

from __future__ import annotations

import pytest

from inhabit.rewards.compose import (
    Changes,
    RewardComposer,
    RewardConfig,
    diff_part,
    lint_counts,
    workspace_changes,
)

CLEAN = "def add(a, b):\n    return a - b\n"
FIXED = "def add(a, b):\n    return a + b\n"
SLOPPY = "import os\nimport sys\n\n\ndef add(a, b):\n    return a + b\n"


async def test_tests_alone_is_grading_reward():
    composer = RewardComposer(RewardConfig())
    for t in (0.0, 1.0):
        out = await composer.compose(tests=t, changes=Changes())
        assert out.reward == t and out.parts == {"tests": t} and out.missing == []


def test_lint_counts_new_findings_only_in_changed_code_files():
    changes = Changes(before={"calc.py": CLEAN, "tests/test_x.py": "import os\n"},
                      after={"calc.py": SLOPPY, "tests/test_x.py": "import os, sys\n"})  # fmt: skip
    assert lint_counts(changes) == (0, 2)  # two unused imports; tests are not linted
    assert lint_counts(Changes(before={"README": "a"}, after={"README": "b"})) is None


async def test_lint_and_diff_parts_and_gating():
    cfg = RewardConfig(lint_weight=1.0, lint_scale=4, diff_weight=1.0, diff_free_lines=2, diff_scale_lines=10)
    composer = RewardComposer(cfg)
    good = await composer.compose(
        tests=1.0, changes=Changes(before={"calc.py": CLEAN}, after={"calc.py": FIXED})
    )
    assert good.parts == {"tests": 1.0, "lint": 1.0, "diff": 1.0} and good.reward == 1.0
    sloppy = await composer.compose(
        tests=1.0, changes=Changes(before={"calc.py": CLEAN}, after={"calc.py": SLOPPY})
    )
    assert sloppy.parts["lint"] == pytest.approx(0.5)  # 2 new findings of 4
    assert sloppy.details["changed_lines"] == 6 and sloppy.parts["diff"] == pytest.approx(1 - 4 / 10)
    assert sloppy.reward == pytest.approx((1.0 + 0.5 + 0.6) / 3)
    no_py = await composer.compose(tests=0.0, changes=Changes(before={"a.txt": "x"}, after={"a.txt": "y"}))
    assert no_py.parts["lint"] is None and no_py.missing == ["lint"]
    gated = RewardComposer(cfg.model_copy(update={"gate_on_tests": True}))
    assert (
        await gated.compose(tests=0.0, changes=Changes(before={"calc.py": CLEAN}, after={"calc.py": FIXED}))
    ).reward == 0.0
    assert diff_part(0, cfg) == 1.0 and diff_part(1000, cfg) == 0.0


async def test_workspace_changes_from_a_sandbox(tmp_path, sandbox_provider):
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "calc.py").write_text(CLEAN)
    (tmp_path / "ws" / "old.txt").write_text("bye\n")
    sandbox = await sandbox_provider.create(tmp_path / "ws")
    await sandbox.write_file("calc.py", FIXED)
    await sandbox.write_file("new.py", "x = 1\n")
    await sandbox.delete_file("old.txt")
    # a name with edge whitespace is its own file, shown to lint, diff and judges as it is
    await sandbox.exec(["sh", "-c", "echo 'y = 2' > 'calc.py '"])
    changes = await workspace_changes(tmp_path / "ws", sandbox)
    await sandbox.close()
    assert changes.before == {"calc.py": CLEAN, "calc.py ": None, "new.py": None, "old.txt": "bye\n"}
    assert changes.after == {"calc.py": FIXED, "calc.py ": "y = 2\n", "new.py": "x = 1\n", "old.txt": None}
    assert "+    return a + b" in changes.diff and "--- /dev/null" in changes.diff
    assert '+++ "b/calc.py "' in changes.diff  # quoted: it must not read as calc.py to a judge
