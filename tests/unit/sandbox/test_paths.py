"""Path handling shared by all backends: normalisation and escapes (lexical and via symlinks)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from inhabit.errors import PathOutsideWorkspace
from inhabit.sandbox import paths


@pytest.mark.parametrize(
    ("given_path", "expected"),
    [
        ("calc.py", "calc.py"),
        ("./pkg/../calc.py", "calc.py"),
        ("/home/dev/project/pkg/x", "pkg/x"),
        ("/home/dev/project", "."),
        ("", "."),
        (".", "."),
        # exact: edge whitespace is part of a name (the harness's tools strip what a model writes)
        (" h/cheat.py", " h/cheat.py"),
        ("notes.txt ", "notes.txt "),
        ("/home/dev/project/ x", " x"),
    ],
)
def test_normalize_accepts_workspace_paths(given_path, expected):
    assert paths.normalize(given_path) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "..",
        "../x",
        "pkg/../../x",
        "/etc/passwd",
        "/home/dev/projectfoo/x",
        "/workspace/x",
        "/home/dev",
        "/",
        "a\x00b",
    ],
)
def test_normalize_rejects_escapes(bad):
    with pytest.raises(PathOutsideWorkspace):
        paths.normalize(bad)


def test_resolve_follows_inside_links_and_rejects_outside_links(tmp_path: Path):
    root = tmp_path / "ws"
    (root / "d").mkdir(parents=True)
    (root / "d" / "f").write_text("x")
    (root / "rel").symlink_to("d")
    (root / "abs_in").symlink_to("/home/dev/project/d")
    (root / "abs_out").symlink_to(str(tmp_path))
    (root / "rel_out").symlink_to("../..")
    (root / "loop").symlink_to("loop")
    assert paths.resolve(root, "rel/f") == root / "d" / "f"
    assert paths.resolve(root, "abs_in/f") == root / "d" / "f"
    for bad in ("abs_out/x", "rel_out/etc", "abs_out", "loop"):
        with pytest.raises(PathOutsideWorkspace):
            paths.resolve(root, bad)
    # Without following the last component, a link itself can be named (to delete it).
    assert paths.resolve(root, "abs_out", follow_last=False) == root / "abs_out"


@given(st.lists(st.sampled_from(["a", "..", ".", "b", "", "/home/dev/project", "c/d"]), max_size=8))
def test_resolve_never_leaves_root(parts):
    root = Path("/nonexistent-root-for-test")
    user = "/".join(parts)
    try:
        host = paths.resolve(root, user)
    except PathOutsideWorkspace:
        return
    assert os.path.commonpath([root, host]) == str(root)
