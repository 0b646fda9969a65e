"""The import rules: layers, no cycles between parts, no import-time cycles inside a part.

Every module under src/inhabit is parsed (not imported) and each of its imports checked, those
inside functions and `if TYPE_CHECKING:` blocks included: a lower part never imports a higher
one, even for a type (move the type down into `inhabit.contracts` or the lower part, or take a
Protocol). The layer order is written here and in docs/architecture.md ("Layers"), and a test
keeps the two the same.

- `LAYERS`, bottom first: a module may import its own layer and those below.
- Commands (`inhabit/cli.py`, `__main__.py`, and each part's `cli.py` or `*_cli.py`) are the top
  layer: they wire parts together for the user, as the orchestrator does for a run.
- Between parts, no cycle, whatever the layers say (two parts of one layer may not import each
  other both ways).
- Inside a part, no cycle among the imports a module runs when it is imported (an import inside a
  function, deferred to the call, is how a part breaks one).

`ALLOWED_EXCEPTIONS` is where an import that has to run up a layer is named, with why it stays
(none does today); any other one fails.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from functools import cache
from pathlib import Path

import pytest

import inhabit

SRC = Path(inhabit.__file__).resolve().parent
DOC = SRC.parents[1] / "docs" / "architecture.md"

# Bottom first. A name is a part (a package under src/inhabit) or a root module.
LAYERS: list[set[str]] = [
    {"errors", "log", "types", "config", "serving", "filetree", "registry"},
    {"envs"},
    {"sandbox"},
    {"tasks"},
    {"grading"},
    {"rewards"},
    {"contracts"},
    {"harness"},
    {"models"},
    {"inference"},
    {"weights"},
    {"trainer"},
    {"rollouts"},
    {"evaluation"},
    {"online"},
    {"taskgen"},
    {"placement"},
    {"observability"},
    {"orchestrator"},
    {"commands"},
]

# (importer, imported) module pairs allowed to run up a layer, each with why it stays: empty, and
# kept so. An entry whose import is gone fails too, so the set only shrinks.
ALLOWED_EXCEPTIONS: dict[tuple[str, str], str] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_command(module: str) -> bool:
    leaf = module.rpartition(".")[2]
    return module in ("inhabit.cli", "inhabit.__main__") or leaf == "cli" or leaf.endswith("_cli")


def part_of(module: str) -> str:
    """The part a module belongs to: `inhabit.sandbox.pool` -> sandbox, `inhabit.rollouts` -> rollouts."""
    if is_command(module):
        return "commands"
    return module.split(".")[1] if module != "inhabit" else "inhabit"


def layer_of(part: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if part in layer)


class _Imports(ast.NodeVisitor):
    """(line, module, runs_at_import) of every import; relative imports resolved."""

    def __init__(self, package: str) -> None:
        self.package = package
        self.depth = 0  # inside a function, or an `if TYPE_CHECKING:` block
        self.found: list[tuple[int, str, bool]] = []

    def _deferred(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _deferred

    def visit_If(self, node: ast.If) -> None:
        test = ast.unparse(node.test)
        if test in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            self._deferred(ast.Module(body=node.body, type_ignores=[]))
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        self.found += [(node.lineno, alias.name, self.depth == 0) for alias in node.names]

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = node.module or ""
        if node.level:
            anchor = self.package.split(".")[: len(self.package.split(".")) - (node.level - 1)]
            base = ".".join([*anchor, base] if base else anchor)
        # `from inhabit import orchestrator` names the package through an attribute
        self.found += [(node.lineno, f"{base}.{alias.name}", self.depth == 0) for alias in node.names]
        self.found.append((node.lineno, base, self.depth == 0))


def imported_modules(source: str, package: str) -> list[tuple[int, str, bool]]:
    """(line, module, runs at import) of every import in `source`, a module of `package`."""
    walker = _Imports(package)
    walker.visit(ast.parse(source))
    return walker.found


@cache
def modules() -> dict[str, Path]:
    found = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}
    assert len(found) > 100  # the walk found the package
    return found


def resolve(name: str) -> str | None:
    """The inhabit module `name` refers to (`inhabit.sandbox.base.SandboxLimits` -> `inhabit.sandbox.base`)."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


@cache
def edges() -> list[tuple[str, int, str, bool]]:
    """(importer, line, imported, runs at import) over every inhabit-to-inhabit import."""
    out = []
    for name, path in modules().items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for line, target, eager in imported_modules(path.read_text(), package):
            if target.startswith("inhabit") and (mod := resolve(target)) and mod != name:
                out.append((name, line, mod, eager))
    return out


def upward_imports() -> dict[tuple[str, str], str]:
    """(importer, imported) -> "path:line" of each import from a lower layer to a higher one."""
    out: dict[tuple[str, str], str] = {}
    for src, line, dst, _ in edges():
        a, b = part_of(src), part_of(dst)
        if "inhabit" not in (a, b) and layer_of(b) > layer_of(a):
            out.setdefault((src, dst), f"{modules()[src].relative_to(SRC.parent)}:{line}")
    return out


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def part_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, _, dst, _ in edges():
        if (src, dst) in ALLOWED_EXCEPTIONS:
            continue
        a, b = part_of(src), part_of(dst)
        if a != b and "inhabit" not in (a, b):
            graph[a].add(b)
    return graph


def eager_graph_within(part: str) -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for src, _, dst, eager in edges():
        if eager and part_of(src) == part_of(dst) == part:
            graph[src].add(dst)
    return graph


# ------------------------------------------------------------------------------------------ tests
def test_every_module_has_a_layer():
    missing = sorted({part_of(m) for m in modules()} - {"inhabit"} - set().union(*LAYERS))
    assert missing == [], f"add these parts to LAYERS (and docs/architecture.md): {missing}"


def test_no_import_runs_up_a_layer():
    found = upward_imports()
    new = [
        f"{where} imports {dst}"
        for (src, dst), where in sorted(found.items())
        if (src, dst) not in ALLOWED_EXCEPTIONS
    ]
    assert new == [], "imports from a lower layer to a higher one (see LAYERS):\n" + "\n".join(new)
    gone = sorted(set(ALLOWED_EXCEPTIONS) - set(found))
    assert gone == [], f"these ALLOWED_EXCEPTIONS no longer occur: remove them: {gone}"


def test_no_cycle_between_parts():
    assert cycles(part_graph()) == [], "parts that import each other (directly or around a circle)"


def test_no_import_time_cycle_inside_a_part():
    found = {part: c for part in {part_of(m) for m in modules()} if (c := cycles(eager_graph_within(part)))}
    assert found == {}, "modules of one part that import each other when imported: defer one import"


def test_no_part_imports_the_orchestrator():
    """The orchestrator drives the other parts; only commands (which register every part's) name it."""
    offenders = [
        f"{src} imports {dst}"
        for src, _, dst, _ in edges()
        if part_of(dst) == "orchestrator" and part_of(src) not in ("orchestrator", "commands")
    ]
    assert offenders == []


def reached_from(start: str) -> set[str]:
    """Every inhabit module `start` imports, directly or through others (deferred imports too)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for src, _, dst, _ in edges():
        graph[src].add(dst)
    seen: set[str] = set()
    todo = [start]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph[module])
    return seen


GRADING_ENTRIES = ("inhabit.grading.grader", "inhabit.grading.check", "inhabit.grading.gradecache")


@pytest.mark.parametrize("entry", GRADING_ENTRIES)
def test_a_task_s_way_through_grading_stays_in_the_grading_package(entry):
    """Followed import by import from where a task enters grading (`grade`, `check_task`, the grade
    cache), the way never leaves `grading` for a part that leads back into it: every module on it
    that imports grading is grading's own, and what else it reaches lies below grading (the task
    format, sandboxes, task environments), never beside or above it."""
    reached = reached_from(entry)
    back_in = sorted(
        f"{src} -> {dst}"
        for src, _, dst, _ in edges()
        if src in reached and part_of(dst) == "grading" and part_of(src) != "grading"
    )
    assert back_in == [], "the way through grading leaves the package and comes back"
    outside = {part_of(m) for m in reached} - {"grading"}
    above = sorted(p for p in outside if layer_of(p) >= layer_of("grading"))
    assert above == [], f"grading reaches parts at or above its own layer: {above}"


def test_the_layer_order_is_the_documented_one():
    text = DOC.read_text()
    block = re.search(r"<!-- layers -->\n```\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md keeps the layer order in a ``` block after <!-- layers -->"
    documented = [
        {name.strip("` ") for name in row.split(":", 1)[1].split(",")}
        for row in reversed(block.group(1).strip().splitlines())
    ]
    assert documented == LAYERS


def test_the_check_sees_every_kind_of_import():
    """The walker catches a top-level, a function-level, a TYPE_CHECKING, a relative and an
    attribute import, and tells those that run at import from the deferred ones."""
    source = (
        "from __future__ import annotations\n"
        "from typing import TYPE_CHECKING\n"
        "import inhabit.orchestrator.run\n"
        "if TYPE_CHECKING:\n    from inhabit.trainer.trainer import Trainer\n"
        "def f():\n    from inhabit.orchestrator import pipeline\n"
        "from ..orchestrator.buffer import GroupBuffer\n"
        "from inhabit import orchestrator\n"
        "from . import dispatch\n"
    )
    found = {m: eager for _, m, eager in imported_modules(source, "inhabit.placement")}
    assert found["inhabit.orchestrator.run"] is True
    assert found["inhabit.trainer.trainer"] is False
    assert found["inhabit.orchestrator.pipeline"] is False
    assert found["inhabit.orchestrator.buffer"] is True
    assert "inhabit.orchestrator" in found and "inhabit.placement.dispatch" in found


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
