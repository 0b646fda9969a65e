"""Options in a project's pytest `addopts` that only measure: coverage, timing, benchmarks, reports.

Many projects put `--cov=pkg --cov-report=term-missing` in their pytest configuration. Under the
task command, which turns plugin autoload off, pytest then refuses to start ("unrecognized
arguments: --cov=pkg"); with plugins on, coverage installs a trace function for the whole run,
which grading's runner integrity checks cannot tell from a payload's. Neither option changes an
outcome, so the task command leaves them out: it overrides `addopts` with the project's own list
less those options (`-o addopts=...`, stated in the command of every task and in the build
report). Everything else in `addopts` (`--doctest-modules`, `--import-mode`, `-p` plugins,
`--strict-markers`) stays as the project wrote it.
"""

from __future__ import annotations

import configparser
import shlex
import tomllib
from pathlib import Path

__all__ = ["addopts_override", "measurement_options", "project_addopts"]

# Options that take their value in the next word when it is not given with `=`.
_WITH_VALUE = frozenset(
    {"--cov", "--cov-report", "--cov-config", "--cov-fail-under", "--cov-context", "--durations",
     "--durations-min", "--junitxml", "--junit-xml", "--junit-prefix", "--html", "--css",
     "--json-report-file", "--benchmark-json", "--benchmark-save", "--benchmark-storage",
     "--benchmark-columns", "--benchmark-sort", "--benchmark-group-by", "--benchmark-name",
     "--benchmark-min-rounds", "--benchmark-min-time", "--benchmark-max-time", "--benchmark-timer",
     "--benchmark-warmup", "--benchmark-warmup-iterations", "--benchmark-calibration-precision",
     "--codspeed-mode", "--memray-bin-path", "--report-log", "--result-log"}
)  # fmt: skip
# Prefixes of options that only measure or report (pytest-cov, pytest's durations and JUnit
# report, pytest-benchmark, pytest-codspeed, pytest-html, pytest-json-report, memray, report-log).
_PREFIXES = (
    "--cov", "--no-cov", "--durations", "--junitxml", "--junit-xml", "--junit-prefix", "--benchmark",
    "--codspeed", "--html", "--self-contained-html", "--css", "--json-report", "--memray",
    "--report-log", "--result-log",
)  # fmt: skip


def _is_measurement(word: str) -> bool:
    name = word.split("=", 1)[0]
    return any(name == p or name.startswith(p + "-") for p in _PREFIXES) or name in _WITH_VALUE


def measurement_options(args: list[str]) -> tuple[list[str], list[str]]:
    """(the options kept, the measurement options dropped, each with its value) of an addopts list."""
    kept: list[str] = []
    dropped: list[str] = []
    i = 0
    while i < len(args):
        word = args[i]
        if not _is_measurement(word):
            kept.append(word)
            i += 1
            continue
        taken = [word]
        takes_next = "=" not in word and word in _WITH_VALUE and i + 1 < len(args)
        if takes_next and not args[i + 1].startswith("-"):
            # `--cov src` takes `src`; `--cov tests/test_x.py` would too, as pytest-cov does.
            taken.append(args[i + 1])
        dropped.append(" ".join(taken))
        i += len(taken)
    return kept, dropped


def project_addopts(root: Path) -> list[str] | None:
    """The `addopts` of the pytest configuration pytest would take at `root` (split into words),
    or None when it has no configuration or no addopts."""
    for name in (
        "pytest.toml",
        ".pytest.toml",
        "pytest.ini",
        ".pytest.ini",
        "pyproject.toml",
        "tox.ini",
        "setup.cfg",
    ):
        path = root / name
        if not path.is_file():
            continue
        found, value = _read(path)
        if found:
            if value is None:
                return None
            return shlex.split(value) if isinstance(value, str) else [str(v) for v in value]
    return None


def _read(path: Path) -> tuple[bool, str | list | None]:
    """(whether the file is a pytest configuration, its addopts or None)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False, None
    if path.suffix == ".toml":
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return False, None
        table = doc.get("tool", {}).get("pytest") if path.name == "pyproject.toml" else doc.get("pytest")
        if not isinstance(table, dict):
            return False, None
        inner = table.get("ini_options")
        section = inner if isinstance(inner, dict) else table
        return True, section.get("addopts")
    parser = configparser.RawConfigParser(strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return False, None
    section = "tool:pytest" if path.name == "setup.cfg" else "pytest"
    if not parser.has_section(section):
        return False, None
    return True, parser.get(section, "addopts", fallback=None)


def addopts_override(root: Path) -> tuple[str, list[str]]:
    """(`-o addopts=...` words for a shell command, or "" when nothing is dropped; the measurement
    options dropped) for the project at `root`."""
    args = project_addopts(root)
    if not args:
        return "", []
    kept, dropped = measurement_options(args)
    if not dropped:
        return "", []
    return "-o " + shlex.quote("addopts=" + shlex.join(kept)), dropped
