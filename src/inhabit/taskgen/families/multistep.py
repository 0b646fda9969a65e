"""The multistep task family: a bug hidden in a small package, found by testing, search and reading.

Each task is a package of 2-5 helper modules (drawn from `multistep_templates`: statistics, text,
inventory, dates, parsing, money; held-out: geometry, grades, schedules, units) plus a facade
module (`api`, `service`...) whose functions compose the helpers, and a pytest suite: one test
file per module. One helper has a planted bug (an operator flip, an off-by-one, a wrong constant,
swapped arguments). The visible tests that call the buggy helper directly are moved to `hidden/`,
so the only visible failure is a facade test: the instruction quotes that test's name and its
error, never the file of the bug, and the agent has to run the tests, read the facade, follow the
call into the helper (or grep for it), edit, and run the tests again. `hidden/` holds a second
call of every helper function, at least one of which the bug fails; `reference.patch` undoes it.
Expected values in the tests are computed by importing the correct package in this process (the
package is our own generated code), so the suite is right by construction.

Turn budget. The task format has no per-task turn limit (the harness's `max_turns` is the run's),
so the budget is stated in the instruction and in `manifest.jsonl` beside the tasks. It is the
least a sequential agent needs, one call a turn: run_tests, read the test file, read the facade,
read the buggy module (one call per 400-line window, the harness's `read_file_max_lines`), edit,
run_tests, finish: 7 turns for a normal variant. An agent that batches independent calls (run the
tests and read the test and facade files in one turn, read every window of the module in the
next) needs 5, whatever the module's length.

Long variants (`long_share` of the tasks) pad every helper module with 70 record-processing
functions (`padding`), about 600 lines a module, placed before the module's own functions so that
the bug lies past the first 400-line read (a constant's bug stays in the header). Measured with
the quickstart tokenizer (`inhabit.models.tokenizer.default_tokenizer`, seed 0): a long package's
source is 18k-30k tokens (normal variants: about 1.6k-3k) and the buggy module alone about 5.9k,
so reading that one module overflows the quickstart model's 1,024-token window or a 4,096-token
`HarnessConfig.context_budget`, and an episode that reads it summarizes (tests/unit/tasks/
test_families.py runs one). A long module takes two 400-line reads: its budget is 8.

Fresh names (`fresh_names=True`, train split only): the package, module, facade and function
names are made-up words (consonant-vowel syllables) instead of the split's fixed lists. Such tasks
are not part of either split: a bootstrap plays them on top of its share of the train split so that
the model it teaches meets names it cannot have memorized, and learns to copy the name the
instruction or an observation shows (`model.bootstrap.fresh_names`).

Deterministic per (seed, split, fresh_names): the same arguments write the same bytes.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import itertools
import json
import keyword
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Any

from inhabit.taskgen.families.multistep_templates import (
    FACADES,
    HELD_OUT,
    HELD_OUT_PACKAGES,
    TRAIN,
    TRAIN_PACKAGES,
    ModuleTemplate,
)
from inhabit.taskgen.families.padding import padding
from inhabit.tasks.build import write_task

__all__ = ["SPLITS", "MultiTask", "generate", "write_multistep_task", "write_multistep_tasks"]

SPLITS = ("train", "held-out")
# Plugin autoload off, as in the quickstart family: the dev environment's plugins cost ~1 s a run.
COMMAND = "PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 python -m pytest -q -p no:cacheprovider"
LONG_PADDING = 70
"""Filler functions per helper module of a long variant."""
READ_WINDOW = 400
"""Lines one read_file shows (HarnessConfig.read_file_max_lines' default)."""
SEQUENTIAL_TURNS = 6
"""run_tests, read test, read facade, edit, run_tests, finish: the buggy module's reads come on top."""

_counter = itertools.count()


@dataclass(frozen=True)
class MultiTask:
    """A generated task: its files, its tests and what the manifest records about it."""

    id: str
    split: str
    package: str
    long: bool
    workspace: dict[str, str]
    hidden: dict[str, str]
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    instruction: str
    reference_patch: str
    turn_budget: int
    bug: dict[str, str] = field(default_factory=dict)
    """module, function, old, new: where the bug is (for analysis; never shown to the agent)."""

    def manifest(self) -> dict[str, Any]:
        return {"id": self.id, "family": "multistep", "split": self.split, "package": self.package,
                "long": self.long, "turn_budget": self.turn_budget, "bug": self.bug}  # fmt: skip


@dataclass
class _Module:
    template: ModuleTemplate
    name: str
    names: dict[str, str]
    facade_name: str
    source: str = ""
    facade: str = ""


_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
_RESERVED = frozenset(
    [*HELD_OUT_PACKAGES, *TRAIN_PACKAGES, *FACADES]
    + [n for t in (*TRAIN, *HELD_OUT) for n in (*t.modules, *t.facade_names)]
    + [o for t in (*TRAIN, *HELD_OUT) for opts in t.names.values() for o in opts]
)
"""Every name of either split's lists: a fresh name is none of them (nor a keyword or a module of
the standard library, which a package or module of that name would shadow in the tests)."""


class _Namer:
    """Made-up identifiers, distinct within one task, drawn from the task's own random stream."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.taken: set[str] = set()

    def word(self, syllables: tuple[int, int] = (2, 3)) -> str:
        while True:
            n = self.rng.randint(*syllables)
            w = "".join(self.rng.choice(_CONSONANTS) + self.rng.choice(_VOWELS) for _ in range(n))
            if (
                w not in self.taken
                and w not in _RESERVED
                and not keyword.iskeyword(w)
                and w not in sys.stdlib_module_names
            ):
                self.taken.add(w)
                return w

    def function(self) -> str:
        """A function or constant name: one word, or two joined by an underscore (as the
        templates' own names are)."""
        return self.word() if self.rng.random() < 0.5 else f"{self.word((1, 2))}_{self.word((1, 2))}"


def _call_text(fn: str, args: str) -> str:
    return fn + (args[:-2] + ")" if args.endswith(",)") else args)


def _evaluate(
    files: dict[str, str], package: str, calls: list[tuple[str, str, str]]
) -> list[tuple[bool, Any]]:
    """(returned, value or 'Type: message') of each (module, function, args) call on `files`.

    The package is written to a temporary folder and imported under a name of its own (its modules
    import each other relatively), then dropped from sys.modules."""
    alias = f"_inhabit_multistep_{next(_counter)}"
    out: list[tuple[bool, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for rel, text in files.items():
            if rel.startswith(package + "/"):
                p = Path(tmp, rel)
                p.parent.mkdir(parents=True, exist_ok=True)
                p.write_text(text)
        root = Path(tmp, package)
        spec = importlib.util.spec_from_file_location(
            alias, root / "__init__.py", submodule_search_locations=[str(root)]
        )
        assert spec is not None and spec.loader is not None
        sys.modules[alias] = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(sys.modules[alias])
            for mod, fn, args in calls:
                func = getattr(importlib.import_module(f"{alias}.{mod}"), fn)
                try:
                    out.append((True, func(*ast.literal_eval(args))))
                except Exception as e:  # the planted bug may raise: that is the test's error
                    out.append((False, f"{type(e).__name__}: {e}"))
        finally:
            for name in [n for n in sys.modules if n == alias or n.startswith(alias + ".")]:
                del sys.modules[name]
    return out


def _pick_modules(
    rng: random.Random, pool: tuple[ModuleTemplate, ...], long: bool, namer: _Namer | None = None
) -> list[_Module]:
    chosen = rng.sample(pool, rng.randint(2, min(5, len(pool))))
    mods = []
    for t in chosen:
        names: dict[str, str] = {}
        for key, options in t.names.items():
            if namer is not None:
                # A constant keeps its upper case, so the module reads as the template's does.
                names[key] = namer.function().upper() if options[0].isupper() else namer.function()
            else:
                names[key] = rng.choice([o for o in options if o not in names.values()])
        if namer is not None:
            m = _Module(t, namer.word(), names, namer.function())
        else:
            m = _Module(t, rng.choice(t.modules), names, rng.choice(t.facade_names))
        m.source = Template(t.source).substitute(names)
        if long:
            # The filler goes between the module's header (docstring, constants) and its own
            # functions, so the bug sits past the first 400-line window: one read does not show it.
            header, _, functions = m.source.partition("\n\n\ndef ")
            filler = "\n\n".join(padding(rng, LONG_PADDING, set(names.values())))
            m.source = f"{header}\n\n\n{filler}\n\ndef {functions}"
        m.facade = Template(t.facade).substitute(names, M=m.name, F=m.facade_name)
        mods.append(m)
    return mods


def _tests(package: str, module: str, calls: list[tuple[str, str, str, Any]]) -> str:
    """A test file: one test per (test name, function, args, expected value)."""
    fns = sorted({fn for _, fn, _, _ in calls})
    lines = [f"from {package}.{module} import {', '.join(fns)}", ""]
    for test, fn, args, want in calls:
        lines += ["", f"def {test}():", f"    assert {_call_text(fn, args)} == {want!r}", ""]
    return "\n".join(lines)


def make_task(
    rng: random.Random, index: int, split: str, long: bool, fresh_names: bool = False
) -> MultiTask | None:
    """One task, or None when the drawn bug shows in no facade test (the caller draws again)."""
    pool, packages = (TRAIN, TRAIN_PACKAGES) if split == "train" else (HELD_OUT, HELD_OUT_PACKAGES)
    namer = _Namer(rng) if fresh_names else None
    if namer is not None:
        package, facade = namer.word(), namer.word()
    else:
        package, facade = rng.choice(packages), rng.choice(FACADES)
    mods = _pick_modules(rng, pool, long, namer)
    imports = ", ".join(sorted(m.name for m in mods))
    domains = ", ".join(m.template.domain for m in mods)
    fixed: dict[str, str] = {
        f"{package}/__init__.py": f'"""{package}: {domains} helpers behind one facade, `{facade}`."""\n',
        f"{package}/{facade}.py": f'"""The functions callers use; they compose the helper modules."""\n\n'
        f"from . import {imports}\n\n\n" + "\n\n".join(m.facade for m in mods),
        **{f"{package}/{m.name}.py": m.source for m in mods},
    }
    bug_mod = rng.choice(mods)
    fn_key, old_t, new_t = rng.choice(bug_mod.template.bugs)
    old, new = (Template(s).substitute(bug_mod.names) for s in (old_t, new_t))
    if bug_mod.source.count(old) != 1:
        return None
    buggy = dict(fixed)
    buggy[f"{package}/{bug_mod.name}.py"] = bug_mod.source.replace(old, new)

    # Every call of the suite, visible and hidden: (file kind, module, function, args, test name).
    calls: list[tuple[str, str, str, str, str]] = []
    for m in mods:
        for key, args in m.template.calls:
            calls.append(("visible", m.name, m.names[key], args, f"test_{m.names[key]}"))
        for key, args in m.template.hidden_calls:
            calls.append(("hidden", m.name, m.names[key], args, f"test_{m.names[key]}_more"))
        for i, args in enumerate(m.template.facade_calls):
            calls.append(
                ("facade", facade, m.facade_name, args, f"test_{m.facade_name}" + ("_other" if i else ""))
            )
    triples = [(mod, fn, args) for _, mod, fn, args, _ in calls]
    want = _evaluate(fixed, package, triples)
    got = _evaluate(buggy, package, triples)
    if not all(ok for ok, _ in want):
        raise AssertionError(f"template error: a call of the correct package raised: {want}")
    failing = [w != g for w, g in zip(want, got, strict=True)]
    first_facade = next(i for i, c in enumerate(calls) if c[0] == "facade" and c[2] == bug_mod.facade_name)
    # The named facade test must fail, and so must a hidden one (grading must not rest on a
    # visible test alone, which the agent could special-case).
    hidden_fails = any(bad and c[0] != "facade" for c, bad in zip(calls, failing, strict=True))
    if not failing[first_facade] or not hidden_fails:
        return None

    files: dict[str, list[tuple[str, str, str, Any]]] = {}
    hidden: list[tuple[str, str, str, Any]] = []
    hidden_imports: dict[str, str] = {}
    fail_to_pass: list[str] = []
    pass_to_pass: list[str] = []
    hidden_file = f"tests/test_{package}_hidden.py"
    for (kind, mod, fn, args, test), (_, value), bad in zip(calls, want, failing, strict=True):
        # A direct visible test of the buggy function would name its file: it goes to hidden/.
        if kind == "hidden" or (kind == "visible" and bad):
            test = test if kind == "hidden" else test + "_direct"
            alias = f"{mod}_{fn}"
            hidden_imports[alias] = f"from {package}.{mod} import {fn} as {alias}"
            hidden.append((test, alias, args, value))
            (fail_to_pass if bad else pass_to_pass).append(f"{hidden_file}::{test}")
            continue
        files.setdefault(mod, []).append((test, fn, args, value))
        (fail_to_pass if bad else pass_to_pass).append(f"tests/test_{mod}.py::{test}")
    workspace = dict(buggy)
    workspace.update({f"tests/test_{mod}.py": _tests(package, mod, cs) for mod, cs in files.items()})
    hidden_lines = [*sorted(hidden_imports.values()), ""]
    for test, alias, args, value in hidden:
        hidden_lines += ["", f"def {test}():", f"    assert {_call_text(alias, args)} == {value!r}", ""]

    facade_test = f"tests/test_{facade}.py::test_{bug_mod.facade_name}"
    value = got[first_facade][1]
    error = (
        value
        if not got[first_facade][0]
        else f"AssertionError: assert {value!r} == {want[first_facade][1]!r}"
    )
    reads = -(-buggy[f"{package}/{bug_mod.name}.py"].count("\n") // READ_WINDOW)
    budget = SEQUENTIAL_TURNS + reads
    instruction = (
        f"The test {facade_test} fails:\n\n    {error}\n\nFind the bug in the package `{package}` and "
        f"fix it; the tests are correct. You have {budget} turns; the tool calls of one turn run together."
    )
    path = f"{package}/{bug_mod.name}.py"
    patch = "".join(
        difflib.unified_diff(
            buggy[path].splitlines(True), fixed[path].splitlines(True), f"a/{path}", f"b/{path}"
        )
    )
    prefix = "ms-fresh" if fresh_names else "ms-train" if split == "train" else "ms-heldout"
    return MultiTask(
        id=f"{prefix}-{index:04d}", split=split, package=package, long=long, workspace=workspace,
        hidden={hidden_file: "\n".join(hidden_lines)}, fail_to_pass=fail_to_pass,
        pass_to_pass=pass_to_pass, instruction=instruction, reference_patch=patch, turn_budget=budget,
        bug={"module": path, "function": bug_mod.names[fn_key], "old": old, "new": new},
    )  # fmt: skip


def generate(
    count: int, seed: int, split: str = "train", long_share: float = 0.25, fresh_names: bool = False
) -> list[MultiTask]:
    """`count` distinct tasks of `split`, deterministic per (seed, split, long_share, fresh_names).

    With `fresh_names` (train only) the tasks are the train domains under made-up names, from a
    stream of their own: never one of the train split's tasks, never a held-out domain."""
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    if fresh_names and split != "train":
        raise ValueError("fresh_names draws train domains only: the held-out split keeps its packages")
    if not 0.0 <= long_share <= 1.0:
        raise ValueError(f"long_share must be within [0, 1], not {long_share}")
    # The split is part of the stream, so a held-out seed never replays train draws.
    rng = random.Random(f"multistep:{split}{':fresh' if fresh_names else ''}:{seed}")
    out: list[MultiTask] = []
    seen: set[str] = set()
    while len(out) < count:
        long = rng.random() < long_share
        t = make_task(rng, len(out), split, long, fresh_names)
        if t is None:
            continue
        key = json.dumps(t.workspace, sort_keys=True)
        if key not in seen:
            seen.add(key)
            out.append(t)
    return out


def write_multistep_task(root: Path, t: MultiTask, command: str = COMMAND) -> Path:
    """Write `t` as a task directory under `root / t.id`."""
    return write_task(
        root / t.id, id=t.id, instruction=t.instruction, workspace=t.workspace, hidden=t.hidden,
        fail_to_pass=t.fail_to_pass, pass_to_pass=t.pass_to_pass, command=command,
        reference_patch=t.reference_patch,
    )  # fmt: skip


def write_multistep_tasks(out: Path, tasks: list[MultiTask], command: str = COMMAND) -> list[Path]:
    """Write every task under `out` and `out/manifest.jsonl` (one object per task: split, turn
    budget, long or not, where the bug is)."""
    out.mkdir(parents=True, exist_ok=True)
    roots = [write_multistep_task(out, t, command) for t in tasks]
    (out / "manifest.jsonl").write_text("".join(json.dumps(t.manifest()) + "\n" for t in tasks))
    return roots
