"""What counts as a test file, as test infrastructure, and as a module that shadows the runner.

Pure functions on '/'-separated relative paths and file bytes; grading (hacks.py) uses them to
decide what to restore or remove in the graded copy.

  * test paths: any file under a directory named `tests` or `test`, `test_*.py`, `*_test.py`,
    `conftest.py`, and the files of the task's required node ids (configurable);
  * pytest configuration: the pytest section of pytest.toml/.pytest.toml/pytest.ini/.pytest.ini
    (whole file), pyproject.toml ([tool.pytest...]), tox.ini ([pytest]), setup.cfg ([tool:pytest]);
  * interpreter start-up hooks: sitecustomize.py, usercustomize.py, *.pth;
  * pytest plugins registered through packaging metadata: a `*.dist-info` or `*.egg-info`
    entry_points.txt with a `[pytest11]` group (importlib.metadata scans sys.path, which holds the
    workspace root under `python -m pytest`);
  * shadowing modules: a top-level module or package named like a standard-library module, one
    of pytest's own dependencies or any installed distribution's top-level module (plugins and
    their dependencies), placed where it comes first on sys.path;
  * names with edge whitespace (`has_edge_space`): they read as another file's name to a person.
"""

from __future__ import annotations

import configparser
import functools
import importlib.metadata
import sys
import tomllib
from collections.abc import Iterable
from fnmatch import fnmatch
from posixpath import basename, dirname

PYTEST_CONFIG_NAMES = (
    "pytest.toml",
    ".pytest.toml",
    "pytest.ini",
    ".pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
)
"""In pytest's own order of precedence within one directory."""

STARTUP_HOOK_NAMES = ("sitecustomize.py", "usercustomize.py")

# pytest and what it imports at start-up; with the standard library these are the names a
# workspace module must not take where it would come first on sys.path.
RUNNER_MODULES = frozenset(
    {"pytest", "_pytest", "py", "pluggy", "iniconfig", "packaging", "exceptiongroup", "tomli",
     "pygments", "colorama", "typing_extensions", "sitecustomize", "usercustomize"}
)  # fmt: skip
_HARMLESS_STDLIB = frozenset({"test", "this", "antigravity", "idlelib", "turtledemo"})
# Top-level names that installed distributions commonly ship by mistake; a workspace takes them
# honestly (its own tests, docs, scripts), and no runner or plugin imports them at start-up.
_GENERIC_TOP_LEVEL = frozenset(
    {"tests", "test", "testing", "docs", "doc", "examples", "scripts", "benchmarks", "bench"}
)


@functools.cache
def installed_top_level_modules() -> frozenset[str]:
    """The top-level module names of every distribution installed in this environment (pytest's
    plugins and what they import at start-up among them, e.g. hypothesis's `_hypothesis_globals`):
    a workspace module under one of these names comes first on sys.path and replaces it.
    Read once per process from packaging metadata (about 0.3 s)."""
    names: set[str] = set()
    for dist in importlib.metadata.distributions():
        top_level = dist.read_text("top_level.txt")
        if top_level:
            names.update(top_level.split())
            continue
        for file in dist.files or ():  # no top_level.txt: a top-level module, or a folder with Python
            if not file.parts or file.parts[0] == "..":  # in it (not one of bundled shared libraries)
                continue
            if len(file.parts) == 1 and file.name.endswith((".py", ".so", ".pyd")):
                names.add(file.name.split(".")[0])
            elif len(file.parts) > 1 and file.name.endswith(".py"):
                names.add(file.parts[0])
    return frozenset(n for n in names if n.isidentifier()) - _GENERIC_TOP_LEVEL


SHADOW_NAMES = RUNNER_MODULES | (frozenset(sys.stdlib_module_names) - _HARMLESS_STDLIB)


UNPARSEABLE = "<unparseable>"


def is_test_path(
    path: str,
    *,
    test_dirs: Iterable[str] = ("tests", "test"),
    file_globs: Iterable[str] = ("test_*.py", "*_test.py", "conftest.py"),
    extra_files: Iterable[str] = (),
) -> bool:
    """Whether grading treats `path` as part of the tests (restored to its original content)."""
    parts = path.split("/")
    dirs = set(test_dirs)
    if any(p in dirs for p in parts[:-1]):
        return True
    if any(fnmatch(parts[-1], g) for g in file_globs):
        return True
    return path in set(extra_files)


def is_test_file_name(path: str) -> bool:
    name = basename(path)
    return fnmatch(name, "test_*.py") or fnmatch(name, "*_test.py")


def pytest_section(path: str, data: bytes) -> object | None:
    """The pytest configuration that file `path` holds (comparable with ==), or None if it has none.

    Unparseable files return UNPARSEABLE: pytest would fail on them too, so they count as config.
    """
    name = basename(path)
    if name in ("pytest.ini", ".pytest.ini", "pytest.toml", ".pytest.toml"):
        return data
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return UNPARSEABLE if name in PYTEST_CONFIG_NAMES else None
    if name == "pyproject.toml":
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            return UNPARSEABLE
        tool = doc.get("tool")
        return tool.get("pytest") if isinstance(tool, dict) else None
    if name in ("tox.ini", "setup.cfg"):
        section = "pytest" if name == "tox.ini" else "tool:pytest"
        parser = configparser.RawConfigParser(strict=False)
        try:
            parser.read_string(text)
        except configparser.Error:
            return UNPARSEABLE
        return dict(parser.items(section)) if parser.has_section(section) else None
    return None


def is_startup_hook(path: str) -> bool:
    name = basename(path)
    return name in STARTUP_HOOK_NAMES or name.endswith(".pth")


def is_plugin_entry_points(path: str, data: bytes) -> bool:
    """An entry_points.txt of packaging metadata that registers a pytest plugin."""
    parent = basename(dirname(path))
    if basename(path) != "entry_points.txt" or not parent.endswith((".dist-info", ".egg-info")):
        return False
    return b"pytest11" in data


def module_name(path: str) -> str | None:
    """The importable top-level name a path provides in its directory (`x.py`, `x/...`, `x.cpython-311.so`)."""
    name = path.split("/")[0]
    if "/" in path:
        return name if name.isidentifier() else None
    for suffix in (".py", ".pyc", ".pyw"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    if name.endswith(".so") or name.endswith(".pyd"):
        return name.split(".")[0]
    return None


def shadowing_name(path: str, sys_path_dirs: Iterable[str]) -> str | None:
    """If `path` provides a module under a SHADOW_NAMES name or an installed distribution's
    top-level name inside one of `sys_path_dirs`
    ('' is the workspace root), return that name."""
    for d in sys_path_dirs:
        prefix = f"{d}/" if d else ""
        if d and not path.startswith(prefix):
            continue
        rest = path[len(prefix) :]
        name = module_name(rest)
        if name and (name in SHADOW_NAMES or name in installed_top_level_modules()):
            return name
    return None


def root_pytest_config(files: dict[str, bytes]) -> str | None:
    """The file at the workspace root that pytest would take as its configuration, if any."""
    for name in PYTEST_CONFIG_NAMES:
        if name in files and pytest_section(name, files[name]) is not None:
            return name
    return None


def has_edge_space(path: str) -> bool:
    """Whether a part of `path` begins or ends with whitespace (`" h/cheat.py"`, `"h\t/x"`): a name
    that reads as another file's in every listing, log and diff a person looks at."""
    return any(part != part.strip() for part in path.split("/"))
