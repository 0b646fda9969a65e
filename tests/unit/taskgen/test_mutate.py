"""AST mutation operators: each plants the bug it names as a minimal, verified text edit."""

from __future__ import annotations

import ast
import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from inhabit.taskgen.mutate import OPERATORS, find_mutations

SOURCE = '''"""Module docstring."""

import os


def clamp(x, lo, hi):
    """Clamp x.  The docstring is never mutated."""
    if x < lo:
        return lo
    if x > hi and not os.environ.get("NOCLAMP", ""):
        return hi
    total = x * 2 + 1
    total += 3
    return divmod(total, -hi)[0] if lo else x


class Box:
    def get(self, key: str = "k"):
        "Short doc."
        return self.items[key]
'''


def _changed_lines(a: str, b: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_every_operator_fires_and_each_edit_is_minimal_and_parses():
    ms = find_mutations(SOURCE, "pkg/mod.py")
    assert {m.operator for m in ms} == set(OPERATORS)
    for m in ms:
        mutated = m.apply(SOURCE)
        ast.parse(mutated)
        assert mutated != SOURCE
        assert ast.dump(ast.parse(mutated)) != ast.dump(ast.parse(SOURCE))
        changed = _changed_lines(SOURCE, mutated)
        assert len(changed) == 2, (m.describe(), changed)  # one line out, one line in
        assert "docstring" not in changed[0] and "Short doc" not in changed[0]
    by = {(m.operator, m.original): m.replacement for m in ms}
    assert by[("flip_comparison", "x < lo")] == "x >= lo"
    assert by[("wrong_operator", "x * 2")] == "x // 2"
    assert by[("off_by_one", "3")] == "4"
    assert by[("wrong_constant", "1")] == "0"
    assert by[("swap_arguments", "divmod(total, -hi)")] == "divmod(-hi, total)"
    assert by[("negate_condition", "x < lo")] == "not x < lo"
    assert by[("drop_statement", "total += 3")] == "pass"
    assert by[("return_none", "return lo")] == "return None"
    assert by[("drop_unary", "-hi")] == "hi"
    assert by[("wrong_operator", "total += 3")] == "total -= 3"
    funcs = {m.function for m in ms}
    assert funcs == {"clamp", "Box.get"}  # default argument values and annotations are outside bodies


def test_keys_identify_the_mutated_file_and_operators_filter():
    ms = find_mutations(SOURCE, "pkg/mod.py", operators=("return_none",))
    assert {m.operator for m in ms} == {"return_none"} and len(ms) == 4
    keys = {m.key(SOURCE) for m in ms}
    assert len(keys) == 4
    assert find_mutations("def broken(:\n", "x.py") == []


ATOMS = st.sampled_from(["a", "b", "1", "2", "(a + b)", "f(a, b)", "a[0]", "-a", "not a"])
OPS = st.sampled_from([" + ", " - ", " * ", " // ", " < ", " == ", " and ", " or ", " % "])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(OPS, ATOMS), min_size=1, max_size=4), ATOMS)
def test_mutants_of_random_expressions_parse_to_the_intended_tree(tail, head):
    expr = head + "".join(op + atom for op, atom in tail)
    source = f"def f(a, b):\n    return {expr}\n"
    for m in find_mutations(source, "x.py"):
        mutated = m.apply(source)
        ast.parse(mutated)  # verified edits always parse
        assert len(_changed_lines(source, mutated)) == 2
