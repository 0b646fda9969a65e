"""AST mutation operators: plant one small, plausible bug in a Python source file.

`find_mutations(source, path)` walks every function and method of a module and lists the places
where one operator applies; `Mutation.apply(source)` returns the mutated source. A mutation edits
only the text of the node it changes (the rest of the file keeps its formatting and comments), so
the reverse patch that fixes it is a one- or two-line diff. Each edit is verified: the mutated
source must parse to exactly the tree the operator meant (else the edit is retried with
parentheses, else dropped), so no candidate is a syntax error or a different bug than described.

Operators (`Mutation.operator`), the bugs a developer makes; the default set (`OPERATORS`):
  boundary          `<` <-> `<=`, `>` <-> `>=` (the boundary of a comparison)
  flip_comparison   `<` <-> `>=`, `<=` <-> `>`, `==` <-> `!=`, `is` <-> `is not`, `in` <-> `not in`
  off_by_one        an integer constant n -> n + 1; a slice bound or `range` stop `e` -> `e + 1`, `e - 1`
  wrong_default     a parameter's default: True <-> False, 0 <-> 1, n -> n + 1
  wrong_constant    True <-> False, 0 <-> 1
  wrong_operator    `+` <-> `-`, `*` <-> `//`... within one precedence level (not on string, list
                    or tuple literals: `"a" - "b"` is no developer's slip); `and` <-> `or`;
                    augmented assignments `+=` <-> `-=`
  swap_arguments    the first two positional arguments of a call
  negate_condition  `if c:` / `while c:` / `x if c else y` -> `not c`
  wrong_variable    a parameter or local read where another one of the same kind was meant (same
                    annotation, or the same kind of literal default or value; defined earlier)
  missing_return    `return expr` -> `expr` (the value computed, then dropped)
  wrong_exception   a built-in exception raised or caught -> a sibling (`ValueError` <-> `TypeError`,
                    `KeyError` <-> `IndexError`...)
  drop_unary        `-x` -> `x`, `not x` -> `x`
Also available (`ALL_OPERATORS`), not by default, since their failures tend to name the line
(NameError) rather than show a wrong value:
  drop_statement    an assignment or expression statement -> `pass` (not the only statement)
  return_none       `return expr` -> `return None`
  empty_string      a non-empty string constant -> ""
"""

from __future__ import annotations

import ast
import copy
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "ALL_OPERATORS",
    "OPERATORS",
    "Mutation",
    "MutationSites",
    "Site",
    "find_mutations",
    "function_spans",
]

OPERATORS = (
    "boundary",
    "flip_comparison",
    "off_by_one",
    "wrong_default",
    "wrong_constant",
    "wrong_operator",
    "swap_arguments",
    "negate_condition",
    "wrong_variable",
    "missing_return",
    "wrong_exception",
    "drop_unary",
)
ALL_OPERATORS = (*OPERATORS, "drop_statement", "return_none", "empty_string")

_BOUNDARY: dict[type, type] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
# Siblings a developer confuses: raising (or catching) one where the other was meant.
_SIBLING_EXCEPTIONS = {
    "ValueError": "TypeError", "TypeError": "ValueError", "KeyError": "IndexError",
    "IndexError": "KeyError", "AttributeError": "TypeError", "LookupError": "ValueError",
    "RuntimeError": "ValueError", "ZeroDivisionError": "ValueError", "OverflowError": "ValueError",
    "NotImplementedError": "RuntimeError", "FileNotFoundError": "OSError", "OSError": "ValueError",
}  # fmt: skip
# Operands that `+`, `-`, `*` on numbers never have: swapping the operator there gives a TypeError
# that names the swap, not a bug a developer writes.
_SEQUENCE_LITERALS = (ast.JoinedStr, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.ListComp, ast.SetComp,
                      ast.DictComp, ast.GeneratorExp)  # fmt: skip

_FLIP_CMP: dict[type, type] = {
    ast.Lt: ast.GtE,
    ast.GtE: ast.Lt,
    ast.LtE: ast.Gt,
    ast.Gt: ast.LtE,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
# Swaps within one precedence level, so the edited text parses the way the tree says.
_SWAP_BINOP: dict[type, type] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.FloorDiv,
    ast.FloorDiv: ast.Mult,
    ast.Div: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
}


@dataclass(frozen=True)
class Mutation:
    """One edit: replace the text between two (line, col) positions with `replacement`."""

    path: str
    operator: str
    function: str
    """Qualified name of the enclosing function (e.g. `Cache.get`)."""
    function_lines: tuple[int, int]
    """First and last line (1-based) of the enclosing function: what coverage selection uses."""
    line: int
    start: tuple[int, int]
    end: tuple[int, int]
    original: str
    replacement: str

    def apply(self, source: str) -> str:
        lines = source.splitlines(keepends=True)
        offsets = [0]
        for text in lines:
            offsets.append(offsets[-1] + len(text))
        # ast columns are UTF-8 byte offsets; convert on the affected lines.
        a = offsets[self.start[0] - 1] + _char_col(lines[self.start[0] - 1], self.start[1])
        b = offsets[self.end[0] - 1] + _char_col(lines[self.end[0] - 1], self.end[1])
        return source[:a] + self.replacement + source[b:]

    def describe(self) -> str:
        return f"{self.operator} in {self.function} at {self.path}:{self.line}"

    def key(self, source: str) -> str:
        """Content hash of the mutated file: equal keys are the same bug (deduplication)."""
        return hashlib.sha256(f"{self.path}\0{self.apply(source)}".encode()).hexdigest()[:16]


def _char_col(line: str, byte_col: int) -> int:
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def function_spans(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) for every function and method, outermost first."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                yield name, child
                yield from walk(child, f"{name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")


def _own_nodes(func: ast.AST) -> Iterator[ast.AST]:
    """Nodes of a function's body, not descending into nested functions, classes or lambdas
    (they are their own functions) nor into docstrings."""
    stack = list(reversed(getattr(func, "body", [])))
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda):
            continue
        if _is_docstring(node):  # bare string statements: docstrings, never code
            continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _is_docstring(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Constant)
        and isinstance(node.value.value, str)
    )


def _is_sequence_operand(node: ast.AST) -> bool:
    return isinstance(node, _SEQUENCE_LITERALS) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str | bytes)
    )


def _edits(
    node: ast.AST, parent_body: list[ast.stmt] | None, scope: _Scope | None = None
) -> Iterator[tuple[str, ast.AST]]:
    """(operator, replacement node) pairs for one node (`scope`: the function's names, where the
    node sits; see `_Scope`)."""
    if scope is not None:
        yield from scope.edits(node)
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _FLIP_CMP:
        new = copy.deepcopy(node)
        new.ops = [_FLIP_CMP[type(node.ops[0])]()]
        yield "flip_comparison", new
        if type(node.ops[0]) in _BOUNDARY:
            new = copy.deepcopy(node)
            new.ops = [_BOUNDARY[type(node.ops[0])]()]
            yield "boundary", new
    elif isinstance(node, ast.BinOp) and type(node.op) in _SWAP_BINOP:
        sequence = _is_sequence_operand(node.left) or _is_sequence_operand(node.right)
        if not (
            isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant | ast.JoinedStr)
        ) and not (sequence and isinstance(node.op, ast.Add | ast.Sub | ast.Mult)):
            new = copy.deepcopy(node)
            new.op = _SWAP_BINOP[type(node.op)]()
            yield "wrong_operator", new
    elif isinstance(node, ast.BoolOp):
        new = copy.deepcopy(node)
        new.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
        yield "wrong_operator", new
    elif isinstance(node, ast.AugAssign) and type(node.op) in (ast.Add, ast.Sub):
        new = copy.deepcopy(node)
        new.op = _SWAP_BINOP[type(node.op)]()
        yield "wrong_operator", new
    elif isinstance(node, ast.Constant):
        v = node.value
        if isinstance(v, bool):
            yield "wrong_constant", ast.Constant(not v)
        elif isinstance(v, int):
            if v in (0, 1):
                yield "wrong_constant", ast.Constant(1 - v)
            else:
                yield "off_by_one", ast.Constant(v + 1)
        elif isinstance(v, str) and v and len(v) < 40:
            yield "empty_string", ast.Constant("")
    elif isinstance(node, ast.Call):
        args = node.args
        starred = any(isinstance(a, ast.Starred) for a in args[:2])
        if len(args) >= 2 and not starred and ast.dump(args[0]) != ast.dump(args[1]):
            new = copy.deepcopy(node)
            new.args[0], new.args[1] = new.args[1], new.args[0]
            yield "swap_arguments", new
    elif isinstance(node, ast.If | ast.While | ast.IfExp):
        yield "negate_condition", ast.UnaryOp(ast.Not(), copy.deepcopy(node.test))
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.Not):
        yield "drop_unary", copy.deepcopy(node.operand)
    elif isinstance(node, ast.Return) and node.value is not None:
        returns_none = isinstance(node.value, ast.Constant) and node.value.value is None
        if not returns_none:
            yield "return_none", ast.Return(ast.Constant(None))
        # A value computed and dropped reads like a forgotten `return`; a bare name or constant
        # on a line of its own does not.
        if not isinstance(node.value, ast.Name | ast.Constant | ast.Attribute | ast.Tuple | ast.Yield):
            yield "missing_return", ast.Expr(copy.deepcopy(node.value))
    if (
        isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Expr)
        and parent_body is not None
        and len(parent_body) > 1
        and not _is_docstring(node)
    ):
        yield "drop_statement", ast.Pass()


def _literal_kind(node: ast.AST | None) -> str | None:
    """The type a value's own text shows (`3` int, `[...]` list, `str(x)` str), or None."""
    if isinstance(node, ast.Constant):
        return None if node.value is None else type(node.value).__name__
    kinds = {ast.List: "list", ast.ListComp: "list", ast.Dict: "dict", ast.DictComp: "dict", ast.Set: "set",
             ast.SetComp: "set", ast.Tuple: "tuple", ast.JoinedStr: "str"}  # fmt: skip
    for cls, kind in kinds.items():
        if isinstance(node, cls):
            return kind
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name = node.func.id
        if name in ("int", "str", "float", "list", "dict", "set", "tuple", "bool", "bytes"):
            return name
        if name in ("len", "sum", "abs", "round"):
            return "int" if name == "len" else None
    return None


_SEQUENCE_FUNCTIONS = frozenset(
    {"len", "sum", "sorted", "enumerate", "zip", "reversed", "any", "all", "min", "max"}
)
_STR_METHODS = frozenset(
    {"join", "split", "strip", "lstrip", "rstrip", "lower", "upper", "startswith", "endswith", "format",
     "replace", "encode", "isdigit", "isalpha", "splitlines", "partition", "rpartition", "zfill"}
)  # fmt: skip


def _usage_kinds(nodes: list[ast.AST]) -> dict[str, set[str]]:
    """What each name's uses say it holds: `num` (arithmetic or comparison with a number, an index,
    a range or slice bound), `seq` (indexed, iterated, measured) or `str` (a string method called)."""
    out: dict[str, set[str]] = {}

    def mark(node: ast.AST | None, kind: str) -> None:
        if isinstance(node, ast.Name):
            out.setdefault(node.id, set()).add(kind)

    def number(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and type(node.value) in (int, float)

    for node in nodes:
        if isinstance(node, ast.Subscript):
            mark(node.value, "seq")
            if not isinstance(node.slice, ast.Slice):
                mark(node.slice, "num")
        elif isinstance(node, ast.Slice):
            for bound in (node.lower, node.upper, node.step):
                mark(bound, "num")
        elif isinstance(node, ast.For | ast.comprehension):
            mark(node.iter, "seq")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in _SEQUENCE_FUNCTIONS and len(node.args) == 1:
                mark(node.args[0], "seq")
            elif node.func.id == "range":
                for arg in node.args:
                    mark(arg, "num")
        elif isinstance(node, ast.Attribute) and node.attr in _STR_METHODS:
            mark(node.value, "str")
        elif isinstance(node, ast.BinOp) and (number(node.left) or number(node.right)):
            mark(node.left, "num")
            mark(node.right, "num")
        elif (
            isinstance(node, ast.Compare)
            and len(node.comparators) == 1
            and (number(node.comparators[0]) or number(node.left))
        ):
            mark(node.left, "num")
            mark(node.comparators[0], "num")
    return out


class _Scope:
    """One function's names and the places where its name-aware operators apply: slice bounds and
    `range` stops (off_by_one), built-in exceptions raised or caught (wrong_exception), and reads
    of a parameter or local where a sibling of the same kind could be meant (wrong_variable)."""

    _SKIP = frozenset({"self", "cls"})

    def __init__(self, func: ast.FunctionDef | ast.AsyncFunctionDef, nodes: list[ast.AST]) -> None:
        a = func.args
        params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
        defaults: dict[str, ast.AST | None] = {}
        positional = [*a.posonlyargs, *a.args]
        for arg, default in zip(positional[len(positional) - len(a.defaults) :], a.defaults, strict=True):
            defaults[arg.arg] = default
        for arg, default in zip(a.kwonlyargs, a.kw_defaults, strict=True):
            defaults[arg.arg] = default
        # name -> (first line it is bound on, "param" or "local", its kind: annotation or literal)
        self.names: dict[str, tuple[int, str, str | None]] = {}
        for arg in params:
            if arg.arg not in self._SKIP:
                kind = (
                    ast.dump(arg.annotation)
                    if arg.annotation is not None
                    else _literal_kind(defaults.get(arg.arg))
                )
                self.names[arg.arg] = (func.lineno, "param", kind)
        self.bounds: set[int] = set()
        self.exceptions: set[int] = set()
        self.callees: set[int] = set()
        for node in nodes:
            if isinstance(node, ast.Assign | ast.AnnAssign | ast.For):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                value = node.iter if isinstance(node, ast.For) else node.value
                for t in targets:
                    if isinstance(t, ast.Name) and t.id not in self.names and t.id not in self._SKIP:
                        if isinstance(node, ast.AnnAssign):
                            kind = ast.dump(node.annotation)
                        else:
                            kind = None if isinstance(node, ast.For) else _literal_kind(value)
                        self.names[t.id] = (node.lineno, "local", kind)
            if isinstance(node, ast.Slice):
                for bound in (node.lower, node.upper):
                    if bound is not None and not isinstance(bound, ast.Constant | ast.UnaryOp):
                        self.bounds.add(id(bound))
            if isinstance(node, ast.Call):
                self.callees.add(id(node.func))
                if isinstance(node.func, ast.Name) and node.func.id == "range" and 1 <= len(node.args) <= 2:
                    stop = node.args[-1]
                    if not isinstance(stop, ast.Constant | ast.Starred):
                        self.bounds.add(id(stop))
            if isinstance(node, ast.Raise) and node.exc is not None:
                exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
                self.exceptions.add(id(exc))
            if isinstance(node, ast.ExceptHandler) and node.type is not None:
                types_ = node.type.elts if isinstance(node.type, ast.Tuple) else [node.type]
                self.exceptions.update(id(t) for t in types_)
        # A name with no annotation and no literal of its own gets the kind its uses show.
        usage = _usage_kinds(nodes)
        for name, (first, role, kind) in list(self.names.items()):
            if kind is None and len(usage.get(name, ())) == 1:
                self.names[name] = (first, role, next(iter(usage[name])))

    def _siblings(self, name: str, line: int) -> list[str]:
        _, role, kind = self.names[name]
        out = []
        for other, (first, other_role, other_kind) in self.names.items():
            if other == name or (first >= line and other_role == "local"):
                continue
            same = kind == other_kind if (kind is not None or other_kind is not None) else role == other_role
            if same:
                out.append(other)
        return out

    def edits(self, node: ast.AST) -> Iterator[tuple[str, ast.AST]]:
        if id(node) in self.bounds and not (
            isinstance(node, ast.BinOp) and isinstance(node.right, ast.Constant)
        ):
            for op in (ast.Add(), ast.Sub()):
                yield "off_by_one", ast.BinOp(copy.deepcopy(node), op, ast.Constant(1))
        if id(node) in self.exceptions and isinstance(node, ast.Name) and node.id in _SIBLING_EXCEPTIONS:
            yield "wrong_exception", ast.Name(_SIBLING_EXCEPTIONS[node.id], ast.Load())
        elif (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.id in self.names
            and id(node) not in self.callees
        ):
            for other in self._siblings(node.id, node.lineno):
                yield "wrong_variable", ast.Name(other, ast.Load())


def _default_edits(func: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[ast.AST, ast.AST]]:
    """(default, replacement) for each literal default of a parameter: the wrong default."""
    for default in [*func.args.defaults, *func.args.kw_defaults]:
        if isinstance(default, ast.Constant):
            v = default.value
            if isinstance(v, bool):
                yield default, ast.Constant(not v)
            elif isinstance(v, int):
                yield default, ast.Constant(1 - v if v in (0, 1) else v + 1)


def _target(node: ast.AST) -> ast.AST:
    # negate_condition edits only the test expression of an if/while/ifexp.
    return node.test if isinstance(node, ast.If | ast.While | ast.IfExp) else node


@dataclass
class Site:
    """A place where an operator applies, not yet turned into verified text (`realize`)."""

    operator: str
    function: str
    function_lines: tuple[int, int]
    target: ast.AST
    new: ast.AST


class MutationSites:
    """Every site of a module, grouped by function; realizing one costs a parse of the file, so a
    builder samples sites first and realizes only those it will try."""

    def __init__(self, source: str, path: str, *, operators: tuple[str, ...] | None = None) -> None:
        self.source, self.path = source, path
        self.by_function: dict[str, list[Site]] = {}
        try:
            self.tree: ast.Module | None = ast.parse(source)
        except (SyntaxError, ValueError):
            self.tree = None
            return
        wanted = set(operators or OPERATORS)
        bodies: dict[int, list[ast.stmt]] = {}
        for node in ast.walk(self.tree):
            for name in ("body", "orelse", "finalbody"):
                block = getattr(node, name, None)
                if isinstance(block, list):
                    for stmt in block:
                        bodies[id(stmt)] = block
        protected = _protected_constants(self.tree)
        for qualname, func in function_spans(self.tree):
            span = (func.lineno, func.end_lineno or func.lineno)
            nodes = list(_own_nodes(func))
            scope = _Scope(func, nodes)
            sites = self.by_function.setdefault(qualname, [])
            if "wrong_default" in wanted:
                sites += [Site("wrong_default", qualname, span, d, new) for d, new in _default_edits(func)]
            for node in nodes:
                if id(node) in protected:
                    continue
                for operator, new in _edits(node, bodies.get(id(node)), scope):
                    if operator in wanted:
                        sites.append(Site(operator, qualname, span, _target(node), new))
            if not sites:
                del self.by_function[qualname]

    def realize(self, site: Site) -> Mutation | None:
        """The verified mutation of `site`, or None when no edit parses to the intended tree."""
        assert self.tree is not None
        return _make(self.source, self.tree, self.path, site.operator, site.function,
                     site.function_lines, site.target, site.new)  # fmt: skip


def find_mutations(source: str, path: str, *, operators: tuple[str, ...] | None = None) -> list[Mutation]:
    """Every verified single-edit mutation of the functions in `source` (file `path`)."""
    sites = MutationSites(source, path, operators=operators)
    out: list[Mutation] = []
    seen: set[tuple] = set()
    for group in sites.by_function.values():
        for site in group:
            m = sites.realize(site)
            if m is not None and (m.start, m.end, m.replacement) not in seen:
                seen.add((m.start, m.end, m.replacement))
                out.append(m)
    return out


def _protected_constants(tree: ast.AST) -> set[int]:
    """ids of constants inside f-strings or annotations: editing them is no bug worth a task."""
    out: set[int] = set()
    for node in ast.walk(tree):
        roots: list[ast.AST] = []
        if isinstance(node, ast.JoinedStr):
            roots.append(node)
        elif isinstance(node, ast.AnnAssign) or (isinstance(node, ast.arg) and node.annotation is not None):
            roots.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.returns is not None:
            roots.append(node.returns)
        for root in roots:
            out.update(id(c) for c in ast.walk(root) if isinstance(c, ast.Constant))
    return out


def _make(
    source: str,
    tree: ast.Module,
    path: str,
    operator: str,
    qualname: str,
    span: tuple[int, int],
    target: ast.AST,
    new: ast.AST,
) -> Mutation | None:
    if getattr(target, "end_lineno", None) is None:
        return None
    original = ast.get_source_segment(source, target) or ""
    expected = _replaced_dump(tree, target, new)
    text = ast.unparse(new)
    minimal = _minimal_texts(source, operator, target, new)
    for candidate in dict.fromkeys([*minimal, text, f"({text})"]):
        m = Mutation(
            path=path,
            operator=operator,
            function=qualname,
            function_lines=span,
            line=target.lineno,
            start=(target.lineno, target.col_offset),
            end=(target.end_lineno, target.end_col_offset),  # type: ignore[arg-type]
            original=original,
            replacement=candidate,
        )
        try:
            got = ast.dump(ast.parse(m.apply(source)))
        except (SyntaxError, ValueError):
            continue
        if got == expected:
            return m
    return None


_TOKENS: dict[type, str] = {
    ast.Lt: "<", ast.GtE: ">=", ast.LtE: "<=", ast.Gt: ">", ast.Eq: "==", ast.NotEq: "!=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
    ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Div: "/", ast.Mod: "%",
    ast.BitAnd: "&", ast.BitOr: "|", ast.LShift: "<<", ast.RShift: ">>", ast.And: "and", ast.Or: "or",
}  # fmt: skip


def _offset(source_lines: list[str], starts: list[int], line: int, col: int) -> int:
    return starts[line - 1] + _char_col(source_lines[line - 1], col)


def _minimal_texts(source: str, operator: str, target: ast.AST, new: ast.AST) -> list[str]:
    """Replacement texts that keep the original spelling of everything the edit does not change
    (quotes, spacing, parentheses), so the reference patch is as small as the bug. Each is still
    verified against the intended tree; the caller falls back to `ast.unparse`."""
    lines = source.splitlines(keepends=True)
    starts = [0]
    for text in lines:
        starts.append(starts[-1] + len(text))

    def span(node: ast.AST) -> tuple[int, int]:
        a = _offset(lines, starts, node.lineno, node.col_offset)  # type: ignore[attr-defined]
        b = _offset(lines, starts, node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return a, b

    base, end = span(target)
    text = source[base:end]

    def replace_between(pairs: list[tuple[ast.AST, ast.AST]], old: str, new_tok: str) -> str | None:
        out, last = [], 0
        for left, right in pairs:
            gap_a, gap_b = span(left)[1] - base, span(right)[0] - base
            gap = text[gap_a:gap_b]
            if gap.count(old) != 1:
                return None
            out.append(text[last:gap_a] + gap.replace(old, new_tok))
            last = gap_b
        return "".join(out) + text[last:]

    candidates: list[str | None] = []
    if operator == "flip_comparison" and isinstance(target, ast.Compare) and isinstance(new, ast.Compare):
        old, tok = _TOKENS[type(target.ops[0])], _TOKENS[type(new.ops[0])]
        candidates.append(replace_between([(target.left, target.comparators[0])], old, tok))
    elif operator == "wrong_operator" and isinstance(target, ast.BinOp) and isinstance(new, ast.BinOp):
        candidates.append(
            replace_between([(target.left, target.right)], _TOKENS[type(target.op)], _TOKENS[type(new.op)])
        )
    elif operator == "wrong_operator" and isinstance(target, ast.BoolOp) and isinstance(new, ast.BoolOp):
        pairs = list(zip(target.values, target.values[1:], strict=False))
        candidates.append(replace_between(pairs, _TOKENS[type(target.op)], _TOKENS[type(new.op)]))
    elif (
        operator == "wrong_operator" and isinstance(target, ast.AugAssign) and isinstance(new, ast.AugAssign)
    ):
        old, tok = _TOKENS[type(target.op)] + "=", _TOKENS[type(new.op)] + "="
        candidates.append(replace_between([(target.target, target.value)], old, tok))
    elif operator == "swap_arguments" and isinstance(target, ast.Call):
        (a0, b0), (a1, b1) = span(target.args[0]), span(target.args[1])
        first, second = source[a0:b0], source[a1:b1]
        candidates.append(
            text[: a0 - base] + second + text[b0 - base : a1 - base] + first + text[b1 - base :]
        )
    elif operator == "negate_condition":
        candidates += [f"not {text}", f"not ({text})"]
    elif operator == "drop_unary" and isinstance(target, ast.UnaryOp):
        a, b = span(target.operand)
        candidates += [source[a:b], f"({source[a:b]})"]
    elif operator == "missing_return" and text.startswith("return"):
        candidates.append(text[len("return") :].lstrip())
    elif operator in ("wrong_constant", "off_by_one", "wrong_default", "empty_string") and isinstance(
        new, ast.Constant
    ):
        candidates.append('""' if new.value == "" and text.startswith('"') else None)
    return [c for c in candidates if c is not None]


def _replaced_dump(tree: ast.Module, target: ast.AST, new: ast.AST) -> str:
    """The dump of `tree` with `target` replaced by `new` (what the edited text must parse to):
    swapped in place for the dump, then put back."""
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, name, new)
                try:
                    return ast.dump(tree)
                finally:
                    setattr(parent, name, target)
            if isinstance(value, list):
                for i, item in enumerate(value):
                    if item is target:
                        value[i] = new
                        try:
                            return ast.dump(tree)
                        finally:
                            value[i] = target
    raise AssertionError("mutation target is not in the tree")
