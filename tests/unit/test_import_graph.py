"""The import rule: the orchestrator drives the other parts, no other part reaches back into it.

Every module under src/inhabit is parsed (not imported) and each of its imports checked, those
inside functions and `if TYPE_CHECKING:` blocks included: outside `inhabit.orchestrator`, only
the root CLI (`inhabit/cli.py`, which registers every part's commands) may name it. The seams
both sides need live in `inhabit.contracts`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import inhabit

SRC = Path(inhabit.__file__).resolve().parent
ALLOWED = {"inhabit.cli"}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, package: str) -> list[tuple[int, str]]:
    """(line, module) of every import in `source`, a module of `package` (relative imports resolved)."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # `from inhabit import orchestrator` names the package through an attribute
            out += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
            out.append((node.lineno, base))
    return out


def imports_of(path: Path) -> list[tuple[int, str]]:
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    return imported_modules(path.read_text(), package)


def is_orchestrator(module: str) -> bool:
    return module == "inhabit.orchestrator" or module.startswith("inhabit.orchestrator.")


def test_no_part_imports_the_orchestrator():
    modules = sorted(SRC.rglob("*.py"))
    assert len(modules) > 100  # the walk found the package
    offenders = [
        f"{path.relative_to(SRC.parent)}:{line} imports {mod}"
        for path in modules
        if not is_orchestrator(module_name(path)) and module_name(path) not in ALLOWED
        for line, mod in imports_of(path)
        if is_orchestrator(mod)
    ]
    assert offenders == [], "only inhabit.orchestrator (and the root CLI) may import it:\n" + "\n".join(
        offenders
    )


def test_the_check_sees_every_kind_of_import():
    """The walker catches a top-level, a function-level, a relative and an attribute import."""
    source = (
        "from __future__ import annotations\n"
        "import inhabit.orchestrator.run\n"
        "def f():\n    from inhabit.orchestrator import pipeline\n"
        "from ..orchestrator.buffer import GroupBuffer\n"
        "from inhabit import orchestrator\n"
        "from . import dispatch\n"
    )
    found = [m for _, m in imported_modules(source, "inhabit.placement")]
    assert {
        "inhabit.orchestrator.run",
        "inhabit.orchestrator.pipeline",
        "inhabit.orchestrator.buffer",
        "inhabit.orchestrator",
        "inhabit.placement.dispatch",
    } <= set(found)
    assert not any(is_orchestrator(m) for m in found if m.startswith("inhabit.placement"))
