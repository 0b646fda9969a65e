"""AST mutation operators: each plants the bug it names as a minimal, verified text edit."""

from __future__ import annotations

import ast
import difflib

from hypothesis import given, settings
from hypothesis import strategies as st

from inhabit.taskgen.mutate import ALL_OPERATORS, OPERATORS, find_mutations

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

    def head(self, n=2):
        if n < 0:
            raise ValueError("negative")
        return self.items[:n]
'''


def _changed_lines(a: str, b: str) -> list[str]:
    return [
        line
        for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]


def test_every_operator_fires_and_each_edit_is_minimal_and_parses():
    assert set(OPERATORS) < set(ALL_OPERATORS)
    ms = find_mutations(SOURCE, "pkg/mod.py", operators=ALL_OPERATORS)
    assert {m.operator for m in ms} == set(ALL_OPERATORS)
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
    assert by[("boundary", "x < lo")] == "x <= lo"
    assert by[("wrong_default", "2")] == "3"
    assert by[("wrong_exception", "ValueError")] == "TypeError"
    assert by[("missing_return", "return self.items[:n]")] == "self.items[:n]"
    assert by[("off_by_one", "n")] in ("n + 1", "n - 1")
    assert by[("wrong_variable", "lo")] == "hi"  # two parameters of one kind; x is a number, lo unknown
    assert ("wrong_variable", "x") not in by
    assert by[("empty_string", '"NOCLAMP"')] == '""'
    funcs = {m.function for m in ms}
    assert funcs == {"clamp", "Box.get", "Box.head"}  # annotations are outside bodies
    # The default set leaves out the operators whose failures name the line.
    assert {m.operator for m in find_mutations(SOURCE, "pkg/mod.py")} == set(OPERATORS)


def test_operators_on_sequences_and_names_stay_plausible():
    source = (
        "def f(items, sep: str, width: int, label: str):\n"
        "    head = items[0]\n"
        "    return sep.join([label, '-' * width]) + str(head)\n"
    )
    ms = find_mutations(source, "m.py")
    swaps = {(m.original, m.replacement) for m in ms if m.operator == "wrong_variable"}
    assert ("sep", "label") in swaps and ("label", "sep") in swaps  # both annotated str
    assert not any("width" in pair for pair in swaps)  # an int is never read for a str
    # `'-' * width` multiplies a string literal: never `//` (the outer `+` of two calls is left
    # to the build's giveaway check, which drops a mutant whose failure reads "unsupported operand").
    assert not any(m.operator == "wrong_operator" and m.original == "'-' * width" for m in ms)


def test_keys_identify_the_mutated_file_and_operators_filter():
    ms = find_mutations(SOURCE, "pkg/mod.py", operators=("return_none",))
    assert {m.operator for m in ms} == {"return_none"} and len(ms) == 5
    keys = {m.key(SOURCE) for m in ms}
    assert len(keys) == 5
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
