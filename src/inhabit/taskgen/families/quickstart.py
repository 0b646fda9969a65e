"""A family of tiny bug-fix tasks (task directories, docs/architecture.md) for the quickstart.

Each task is a module of two two-argument functions whose names say what they compute
(`total`, `minus`, `scale`, ...); one function has its operator swapped for another. The visible
test file has one test per function, so the buggy function's test fails; `hidden/` adds a second
case per function that only grading sees. The functions of a module share their argument
names (a module's style) and the wrong operator differs from the other function's, so the buggy
`return` line occurs exactly once (what an `edit_file` of that line needs): fixing it means
finding the function the test names in the file, copying its line and writing the operator the
instruction asks for.

The family is deterministic per seed; `split_tasks` separates train from held-out by index, and
held-out tasks are different modules (other name/argument/bug combinations), not copies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from inhabit.tasks.build import write_task

# Plugin autoload off: grading's own plugins are passed with -p and still load, while the
# unrelated plugins a dev environment holds (hypothesis, asyncio...) cost ~1 s of CPU per run.
QUICKSTART_COMMAND = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider"

OPS: dict[str, list[str]] = {
    "+": ["add", "plus", "total", "combine", "increase", "sum_up"],
    "-": ["sub", "minus", "diff", "decrease", "reduce", "take_away"],
    "*": ["mul", "times", "product", "scale", "multiply", "grow"],
}
VERBS = {"+": "add", "-": "subtract", "*": "multiply"}
ARGS = [("a", "b"), ("x", "y"), ("m", "n"), ("p", "q"), ("u", "v"), ("i", "j"), ("s", "t"), ("k", "w")]
MODULES = ["calc", "arith", "ops", "mathx", "numeric", "helpers", "compute", "basic", "tools", "units"]
FUNCTIONS = 2  # per module; the agent must find the one its test names
CASES = [(7, 3), (9, 4), (6, 5), (8, 2)]


def apply(op: str, a: int, b: int) -> int:
    return {"+": a + b, "-": a - b, "*": a * b}[op]


@dataclass(frozen=True)
class Fn:
    name: str
    op: str
    args: tuple[str, str]

    def line(self, op: str | None = None) -> str:
        a, b = self.args
        return f"    return {a} {op or self.op} {b}"


@dataclass(frozen=True)
class QuickTask:
    """What the scripted expert needs to know about a generated task."""

    id: str
    module: str
    fns: tuple[Fn, ...]
    bug: int
    """Index of the buggy function."""
    wrong_op: str

    @property
    def buggy(self) -> Fn:
        return self.fns[self.bug]

    @property
    def instruction(self) -> str:
        f = self.buggy
        return (
            f"The test tests/test_{self.module}.py::test_{f.name} fails: {f.name} should {VERBS[f.op]} its "
            f"arguments. Fix the bug in {self.module}.py."
        )


def make_task(rng: random.Random, index: int) -> QuickTask:
    ops = list(OPS)
    args = rng.choice(ARGS)
    fns: list[Fn] = []
    used: set[str] = set()
    for _ in range(FUNCTIONS):
        op = rng.choice(ops)
        name = rng.choice([n for n in OPS[op] if n not in used])
        used.add(name)
        fns.append(Fn(name, op, args))
    bug = rng.randrange(FUNCTIONS)
    # The buggy line must occur once: its wrong operator differs from every other function's.
    others = {f.op for i, f in enumerate(fns) if i != bug}
    choices = [o for o in ops if o != fns[bug].op and o not in others]
    if not choices:
        return make_task(rng, index)
    wrong = rng.choice(choices)
    return QuickTask(
        id=f"qs-{index:04d}", module=rng.choice(MODULES), fns=tuple(fns), bug=bug, wrong_op=wrong
    )


def _source(t: QuickTask) -> str:
    parts = []
    for i, f in enumerate(t.fns):
        a, b = f.args
        parts.append(f"def {f.name}({a}, {b}):\n{f.line(t.wrong_op if i == t.bug else None)}\n")
    return "\n\n".join(parts)


def _tests(t: QuickTask, case: tuple[int, int], suffix: str = "") -> str:
    names = ", ".join(f.name for f in t.fns)
    lines = [f"from {t.module} import {names}", ""]
    for f in t.fns:
        lines += [
            "",
            f"def test_{f.name}{suffix}():",
            f"    assert {f.name}({case[0]}, {case[1]}) == {apply(f.op, *case)}",
            "",
        ]
    return "\n".join(lines)


def write_quick_task(root: Path, t: QuickTask) -> Path:
    """Write `t` as a task directory under `root / t.id`."""
    test_file = f"tests/test_{t.module}.py"
    hidden_file = f"tests/test_{t.module}_hidden.py"
    bug = t.buggy.name
    return write_task(
        root / t.id,
        id=t.id,
        instruction=t.instruction,
        workspace={f"{t.module}.py": _source(t), test_file: _tests(t, CASES[0])},
        hidden={hidden_file: _tests(t, CASES[1], "_more")},
        fail_to_pass=[f"{test_file}::test_{bug}", f"{hidden_file}::test_{bug}_more"],
        pass_to_pass=[f"{test_file}::test_{f.name}" for f in t.fns if f.name != bug],
        command=QUICKSTART_COMMAND,
    )


def generate(count: int, seed: int) -> list[QuickTask]:
    """`count` distinct tasks (no two with the same module text), deterministic per seed."""
    rng = random.Random(seed)
    out: list[QuickTask] = []
    seen: set[str] = set()
    while len(out) < count:
        t = make_task(rng, len(out))
        key = t.module + _source(t)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def split_tasks(tasks: list[QuickTask], held_out: int) -> tuple[list[QuickTask], list[QuickTask]]:
    """(train, held_out): the last `held_out` tasks are held out."""
    return tasks[:-held_out], tasks[-held_out:]
