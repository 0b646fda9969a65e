"""The README's Layout tree names only paths that exist, so the map cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def layout_paths() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## Layout", 1)[1].split("```", 2)[1]
    paths: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, folder) of the enclosing folders
    for line in block.splitlines():
        match = re.match(r"^( *)(\S+)\s", line + " ")
        if not match or len(match.group(1)) >= 20:  # blank or a continuation of a description
            continue
        indent, name = len(match.group(1)), match.group(2)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = "".join(folder for _, folder in stack) + name
        paths.append(path)
        if name.endswith("/"):
            stack.append((indent, name))
    return paths


def test_every_layout_path_exists():
    paths = layout_paths()
    assert len(paths) > 40, "the Layout tree was not found or is nearly empty"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, f"README Layout names paths that do not exist: {missing}"


def test_every_part_folder_is_in_the_layout():
    paths = set(layout_paths())
    parts = [p.name for p in (ROOT / "src" / "inhabit").iterdir() if p.is_dir() and p.name != "__pycache__"]
    absent = [p for p in parts if f"src/inhabit/{p}/" not in paths]
    assert not absent, f"parts missing from the README Layout: {absent}"
