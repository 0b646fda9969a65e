"""Why a test suite cannot run at all, said once: the first error line and what to do.

When the untouched workspace of a task (or of a project a build starts from) cannot even collect
its tests (a module that is not installed, a syntax error, a conftest that fails to import), every
required test reads as an error and every grade raises the same flags. Reported per test id, one
cause becomes dozens of lines with wrong hints. `cannot_run` finds that case in a test run's
facts (collection errors, or no report at all) and returns one `Cause`: the first error line, the
missing module when there is one, and a hint that names the fix (an `[environment]` for a missing
third-party package, `PYTHONPATH=src` for a src-layout project's own package).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["Cause", "cannot_run", "first_error_line"]

_ERROR_LINE = re.compile(r"^(?:E\s+)?([A-Za-z_][\w.]*(?:Error|Exception|Exit): .*)$")
_MISSING = re.compile(r"No module named '([^']+)'")
# argparse's complaint about the command line, as pytest prints it after its usage line:
# `python -m pytest: error: unrecognized arguments: --cov=pkg` (options of a plugin not loaded).
_USAGE_ERROR = re.compile(r"^\S.*?: error: (.+)$")
_UNRECOGNIZED = re.compile(r"unrecognized arguments: (.+)$")


@dataclass(frozen=True)
class Cause:
    """The one reason a suite cannot run: its first error line, the missing module (or None) and
    the suggested fix."""

    first_error: str
    missing_module: str | None
    hint: str
    where: str = ""

    def message(self) -> str:
        where = f" ({self.where})" if self.where else ""
        return f"the untouched workspace cannot run its tests{where}: {self.first_error}; {self.hint}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def first_error_line(text: str) -> str:
    """The first line that names an exception (`ModuleNotFoundError: No module named 'x'`), else
    pytest's command-line error (`error: unrecognized arguments: --cov=pkg`), else the last
    non-empty line, else ''."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in lines:
        m = _ERROR_LINE.match(line)
        if m:
            return m.group(1)[:300]
    for line in lines:
        m = _USAGE_ERROR.match(line)
        if m and not line.startswith("ERROR: usage:"):
            return f"error: {m.group(1)}"[:300]
    return lines[-1][:300] if lines else ""


def _own_top_names(workspace: Path | None) -> set[str]:
    """Top-level module names the project itself provides (flat and src layouts)."""
    if workspace is None or not workspace.is_dir():
        return set()
    names: set[str] = set()
    for top in (workspace, workspace / "src"):
        if top.is_dir():
            for p in top.iterdir():
                if p.is_dir() and (p / "__init__.py").is_file():
                    names.add(p.name)
                elif p.suffix == ".py":
                    names.add(p.stem)
    return names


def _hint(missing: str | None, workspace: Path | None, has_environment: bool, first: str = "") -> str:
    unknown = _UNRECOGNIZED.search(first)
    if unknown:
        return (
            f"pytest does not know {unknown.group(1).strip()}: options of a pytest plugin that is not "
            "loaded (the default command turns plugin autoload off). Pass --plugins with the plugin "
            "among the project's test requirements, or --command with options pytest knows"
        )
    if missing is None:
        return "fix the error (run the command in the workspace to see it whole)"
    top = missing.split(".", 1)[0]
    if top in _own_top_names(workspace):
        if workspace is not None and (workspace / "src" / top).exists():
            return (
                f"{top!r} is the project's own package under src/: put src on the path in the "
                "[grading] command (PYTHONPATH=src:$PYTHONPATH python -m pytest ...)"
            )
        return f"{top!r} is the project's own module: check that it imports (a syntax or import error in it)"
    if has_environment:
        return (
            f"the task's [environment] lacks the package that provides {top!r}: add it to the "
            "project's test requirements and lock again (inhabit env lock)"
        )
    return (
        f"the package that provides {top!r} is not installed where the tests run: give the task an "
        "[environment] with the project's test requirements (inhabit env lock TASK_DIR)"
    )


def cannot_run(
    outcomes: Mapping[str, str],
    required: Iterable[str],
    collection_errors: Mapping[str, str],
    *,
    integrity: str = "ok",
    output_tail: str = "",
    workspace: Path | None = None,
    has_environment: bool = False,
) -> Cause | None:
    """The cause when no required test could run (each is an error or missing because collection
    failed, or pytest wrote no report at all); None when the suite ran (tests may still fail)."""
    required = list(required)
    if integrity == "missing":
        text = output_tail
        where = "no test report"
    elif (
        collection_errors
        and required
        and all(outcomes.get(n, "missing") in ("error", "missing") for n in required)
    ):
        path, text = next(iter(collection_errors.items()))
        where = (
            f"collecting {path}"
            if len(collection_errors) == 1
            else f"collecting {path} and {len(collection_errors) - 1} more"
        )
    else:
        return None
    first = first_error_line(text) or "pytest exited before running any test"
    m = _MISSING.search(text)
    missing = m.group(1) if m else None
    return Cause(first, missing, _hint(missing, workspace, has_environment, first), where)
