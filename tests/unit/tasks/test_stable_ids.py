"""Test ids that follow set iteration order (hash randomization, objects hashed by their address)
or change every run: every test run pins PYTHONHASHSEED and turns address randomization off, and
the task builder drops ids that still differ between two runs."""

from __future__ import annotations

from pathlib import Path

from inhabit.grading import hacks
from inhabit.grading.check import check_task
from inhabit.grading.testrun import run_tests
from inhabit.taskgen.builder import BuildConfig, build_tasks
from inhabit.tasks.task import load_task
from task_fixtures import write_tree

WORDS = '''"""Words, measured."""


def measure(word):
    vowels = 0
    for c in word:
        if c in "aeiou":
            vowels += 1
    return {"len": len(word), "vowels": vowels}


def shout(word):
    return word.upper() + "!"
'''

# The dict values get positional ids (`apple-expected3`): the position follows the set's iteration
# order, which follows the hash seed, as in real suites that parametrize over a set.
WORD_TESTS = """import random

import pytest

from pkg.words import measure, shout

WORDS = {"apple", "kiwi", "banana", "cherry", "fig", "grape", "lemon", "mango", "olive", "peach"}


@pytest.mark.parametrize("word,expected", [(w, {"len": len(w)}) for w in WORDS])
def test_length(word, expected):
    assert measure(word)["len"] == expected["len"]


@pytest.mark.parametrize("word,expected", [(w, {"n": sum(c in "aeiou" for c in w)}) for w in WORDS])
def test_vowels(word, expected):
    assert measure(word)["vowels"] == expected["n"]


@pytest.mark.parametrize("seed", [random.randrange(10**9)])  # a new id in every run
def test_shout_any(seed):
    assert shout(str(seed)).endswith("!")


def test_shout():
    assert shout("hi") == "HI!"
"""

UNSTABLE = "tests/test_words.py::test_shout_any"


def write_project(root: Path) -> Path:
    return write_tree(root, {"pkg/__init__.py": "", "pkg/words.py": WORDS, "tests/test_words.py": WORD_TESTS})


def _hash_ordered(outcomes: dict[str, str]) -> set[str]:
    return {n for n in outcomes if not n.startswith(UNSTABLE)}


async def test_pinned_hash_seed_gives_the_same_ids_in_every_run(tmp_path, sandbox_provider, fast_command):
    sandbox = await sandbox_provider.create(write_project(tmp_path / "p"))
    try:
        runs = [await run_tests(sandbox, fast_command, timeout_s=60) for _ in range(2)]
        other = await run_tests(sandbox, fast_command, timeout_s=60, hash_seed=1)
    finally:
        await sandbox.close()
    assert all(r.integrity == "ok" and len(r.passed) == 22 for r in [*runs, other])
    assert _hash_ordered(runs[0].outcomes) == _hash_ordered(runs[1].outcomes)
    # The fixture is what it claims: another seed orders the set differently, so other ids.
    assert _hash_ordered(runs[0].outcomes) != _hash_ordered(other.outcomes)


async def test_builder_builds_from_hash_ordered_ids_and_drops_unstable_ones(tmp_path, sandbox_provider):
    project = write_project(tmp_path / "p")
    cfg = BuildConfig(operators=("return_none", "off_by_one"), per_function=2)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    assert report.unstable_ids_dropped == 1 and report.flaky_dropped == 0
    assert report.baseline_tests == 21
    assert "collection_error" not in report.statuses, report.statuses
    assert report.kept >= 1, report.statuses  # every kept task passed `tasks check`
    for task_id in report.tasks:
        task = load_task(tmp_path / "out" / task_id)
        required = task.grading.required_tests
        assert not any(n.startswith(UNSTABLE) for n in required)
        assert any("-expected" in n for n in required)
        check = await check_task(tmp_path / "out" / task_id, sandbox_provider)
        assert check.valid, check.problems
        assert check.after is not None and check.after["reward"] == 1.0
        assert hacks.TESTS_MISSING not in check.after["flags"]
        assert hacks.TESTS_MISSING not in check.before["flags"]


# isodate's shape: cases in a set of tuples, some holding None. On Python 3.11 hash(None) is None's
# address, so without a fixed address layout the set's order, and the positional ids of the
# date values (`expected17`), change from run to run whatever the hash seed.
DATES = '''"""Dates, parsed."""

import datetime


def parse(text):
    if not text.isdigit():
        return None
    return datetime.date(2000, 1, int(text))
'''

DATE_TESTS = """import datetime

import pytest

from pkg.dates import parse

CASES = {(str(day) if day % 3 else "x" + str(day), None if day % 3 == 0 else datetime.date(2000, 1, day))
         for day in range(1, 25)}


@pytest.mark.parametrize("text,expected", CASES)
def test_parse(text, expected):
    assert parse(text) == expected
"""


def write_date_project(root: Path) -> Path:
    (root / "pkg").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pkg" / "__init__.py").write_text("")
    (root / "pkg" / "dates.py").write_text(DATES)
    (root / "tests" / "test_dates.py").write_text(DATE_TESTS)
    return root


async def test_ids_over_a_set_hashed_by_address_are_the_same_in_every_run(
    tmp_path, sandbox_provider, fast_command
):
    sandbox = await sandbox_provider.create(write_date_project(tmp_path / "p"))
    try:
        runs = [await run_tests(sandbox, fast_command, timeout_s=60) for _ in range(3)]
        # The fixture is what it claims: plain runs (address randomization on) collect other ids.
        plain = [
            await sandbox.exec(["sh", "-c", f"PYTHONHASHSEED=0 {fast_command} --co tests"]) for _ in range(3)
        ]
    finally:
        await sandbox.close()
    assert all(r.integrity == "ok" and len(r.passed) == 24 for r in runs)
    assert sorted(runs[0].outcomes) == sorted(runs[1].outcomes) == sorted(runs[2].outcomes)
    assert any("-expected" in n for n in runs[0].outcomes)
    assert len({p.stdout for p in plain}) > 1


async def test_builder_tasks_over_address_hashed_ids_pass_task_check_twice(tmp_path, sandbox_provider):
    project = write_date_project(tmp_path / "p")
    cfg = BuildConfig(operators=("off_by_one", "flip_comparison"), per_function=3)
    report = await build_tasks(project, tmp_path / "out", sandbox_provider, cfg, progress=False)
    assert report.unstable_ids_dropped == 0 and report.baseline_tests == 24
    assert report.kept >= 1, report.statuses
    for task_id in report.tasks:
        for _ in range(2):
            check = await check_task(tmp_path / "out" / task_id, sandbox_provider)
            assert check.valid, check.problems
