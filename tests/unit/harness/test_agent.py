"""`inhabit agent`'s parts: choosing a policy, diffing the sandbox against the repository, applying."""

from __future__ import annotations

from pathlib import Path

import pytest

from inhabit.errors import ConfigError
from inhabit.harness.agent import apply_changes, render_diff, workspace_changes
from inhabit.inference.openai_policy import OpenAIPolicy
from inhabit.inference.policies import make_policy


def test_make_policy_picks_by_url_or_folder(tmp_path: Path) -> None:
    policy = make_policy("http://127.0.0.1:9/v1", model_name="m")
    assert isinstance(policy, OpenAIPolicy) and policy.model == "m"
    with pytest.raises(ConfigError, match="neither an http"):
        make_policy(str(tmp_path / "missing"))


async def test_changes_diff_and_apply_skip_caches(sandbox, repo: Path) -> None:
    await sandbox.write_file("calc.py", "def add(a, b):\n    return a + b\n")
    await sandbox.write_file("new/module.py", "X = 1\n")
    await sandbox.delete_file("README.md")
    await sandbox.write_file("__pycache__/calc.cpython-311.pyc", b"\0\1")
    await sandbox.write_file(".pytest_cache/v", "x")
    changes = await workspace_changes(repo, sandbox)
    assert [(c.path, c.kind) for c in changes] == [
        ("README.md", "deleted"),
        ("calc.py", "modified"),
        ("new/module.py", "added"),
    ]
    diff = render_diff(changes)
    assert (
        "--- a/calc.py\n+++ b/calc.py" in diff and "+++ b/new/module.py" in diff and "+++ /dev/null" in diff
    )
    apply_changes(repo, changes)
    assert not (repo / "README.md").exists() and (repo / "new" / "module.py").read_text() == "X = 1\n"
    assert not (repo / "__pycache__").exists()
    assert await workspace_changes(repo, sandbox) == []
