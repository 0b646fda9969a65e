"""The functions of a project's original Python files, by qualified name, with a hash of each
one's source text: what grading hands the seal plugin (`project_functions` in its cfg.json) so that
a finding raised by the project's own code, unchanged, is told from one raised by code the agent
wrote (`seal_plugin._untouched_function`).

The same walk is written once more inside the seal plugin (it runs in the task's interpreter and
imports nothing of inhabit); tests/unit/grading/test_project_functions.py keeps the two equal.
Source text, not bytecode: the host's Python and the task's may differ.
"""

from __future__ import annotations

import ast
import hashlib
from collections.abc import Iterator, Mapping

__all__ = ["function_sources", "project_functions"]


def function_sources(text: str) -> Iterator[tuple[str, ast.AST]]:
    """(qualified name as Python spells it, node) of every function in a module's source."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                yield name, child
                yield from walk(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, prefix + child.name + ".")
            else:
                yield from walk(child, prefix)

    yield from walk(ast.parse(text), "")


def _digest(text: str, node: ast.AST) -> str:
    return hashlib.sha256((ast.get_source_segment(text, node) or "").encode()).hexdigest()[:32]


_CACHE: dict[str, dict[str, str]] = {}


def project_functions(files: Mapping[str, bytes]) -> dict[str, dict[str, str]]:
    """{path: {qualified name: source hash}} of the .py files among `files` (a file that is not
    UTF-8 or does not parse here gives nothing: its code earns no allowance). A name defined twice
    keeps its first definition."""
    out: dict[str, dict[str, str]] = {}
    for path, data in files.items():
        if not path.endswith(".py"):
            continue
        key = hashlib.sha256(data).hexdigest()
        if key not in _CACHE:
            if len(_CACHE) > 20_000:  # a long-lived grader meets many projects
                _CACHE.clear()
            try:
                text = data.decode("utf-8")
                found: dict[str, str] = {}
                for name, node in function_sources(text):
                    found.setdefault(name, _digest(text, node))
            except (UnicodeDecodeError, SyntaxError, ValueError, RecursionError):
                found = {}
            _CACHE[key] = found
        if _CACHE[key]:
            out[path] = _CACHE[key]
    return out
