"""What a project's tests need, read the way the project declares it.

In order, each adding to the list (`Requirement(text, source)` keeps where each line came from,
so an error can name it):
  * `[project] dependencies` of pyproject.toml (or `[options] install_requires` of setup.cfg);
  * its optional-dependency extras named test, tests or testing (dev only when none of those is
    declared), or the extras the user names (`--extra`); setup.cfg's `[options.extras_require]`
    the same way (setup.py is never executed, so extras only it declares are not seen);
  * PEP 735 `[dependency-groups]` test, tests, testing (dev as the fallback), or `--group`;
  * requirements files for tests (requirements-test.txt, requirements/test.txt, test-requirements.txt,
    ... or `--requirements FILE`), following `-r` includes inside the project;
  * `deps` of tox.ini's [testenv] when nothing above named a test requirement.
The project itself is never a requirement (`-e .`, `.`, `{toxinidir}` lines are left out): tests
import the workspace's code, so a fix is what gets graded, not an installed copy.
"""

from __future__ import annotations

import configparser
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from inhabit.errors import EnvError

__all__ = ["Requirement", "project_requirements"]

_TEST_NAMES = ("test", "tests", "testing")
_REQ_FILES = (
    "requirements-test.txt", "requirements-tests.txt", "requirements_test.txt", "test-requirements.txt",
    "test_requirements.txt", "requirements/test.txt", "requirements/tests.txt", "requirements/testing.txt",
    "requirements-dev.txt", "requirements/dev.txt", "dev-requirements.txt",
)  # fmt: skip
_SELF = re.compile(r"^(-e\s+)?(\.|\.\[.*\]|\{toxinidir\}.*|file:\.?)$")


@dataclass(frozen=True)
class Requirement:
    """One requirement line (PEP 508) and where the project declares it."""

    text: str
    source: str


def _own_name(pyproject: dict) -> str:
    return re.sub(r"[-_.]+", "-", str(pyproject.get("project", {}).get("name", ""))).lower()


def _is_self(text: str, own: str) -> bool:
    name = re.split(r"[\s\[<>=!~;]", text.strip(), maxsplit=1)[0]
    return bool(_SELF.match(text.strip())) or (bool(own) and re.sub(r"[-_.]+", "-", name).lower() == own)


def _group(groups: dict, name: str, seen: tuple[str, ...] = ()) -> list[str]:
    """A PEP 735 group's requirement strings, `{include-group = ...}` entries expanded."""
    if name in seen:
        raise EnvError(f"[dependency-groups] {name} includes itself")
    out: list[str] = []
    for item in groups.get(name, []):
        if isinstance(item, dict) and "include-group" in item:
            out += _group(groups, str(item["include-group"]), (*seen, name))
        elif isinstance(item, str):
            out.append(item)
    return out


def _choose(named: Sequence[str] | None, declared: dict, missing_what: str) -> list[str]:
    """The extras (or groups) to read: the names given, each of which must be declared, else the
    declared test names (test, tests, testing), else dev."""
    if named is None:
        return [n for n in _TEST_NAMES if n in declared] or (["dev"] if "dev" in declared else [])
    missing = [n for n in named if n not in declared]
    if missing:
        raise EnvError(f"{missing_what} {missing[0]!r} (it has: {', '.join(declared) or 'none'})")
    return list(named)


def _requirements_file(path: Path, root: Path, depth: int = 0) -> list[Requirement]:
    if depth > 5:
        raise EnvError(f"{path}: -r includes nest deeper than 5")
    out: list[Requirement] = []
    rel = path.relative_to(root).as_posix()
    for raw in path.read_text().splitlines():
        line = raw.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith(("-r ", "--requirement ")):
            inc = (path.parent / line.split(None, 1)[1]).resolve()
            if root.resolve() not in inc.parents or not inc.is_file():
                raise EnvError(
                    f"{rel}: includes {line.split(None, 1)[1]!r}, which is not a file in the project"
                )
            out += _requirements_file(inc, root, depth + 1)
            continue
        if line.startswith("-"):
            continue  # index options, -c constraints, -e of the project: the lock decides those
        out.append(Requirement(line, rel))
    return out


def _tox_deps(root: Path) -> list[Requirement]:
    tox = root / "tox.ini"
    if not tox.is_file():
        return []
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(tox)
    except configparser.Error as e:
        raise EnvError(f"tox.ini cannot be read: {e}") from e
    if not parser.has_option("testenv", "deps"):
        return []
    out: list[Requirement] = []
    for line in parser.get("testenv", "deps").splitlines():
        line = line.split("#", 1)[0].strip()
        include = re.match(r"^-r\s*(\S+)$", line)
        if include and "{" not in line:  # -rrequirements.txt: that file's requirements
            path = (root / include.group(1)).resolve()
            if root.resolve() in path.parents and path.is_file():
                out += _requirements_file(path, root)
            continue
        if not line or line.startswith("-") or "{" in line or re.match(r"^[\w,!-]+:\s", line):
            continue  # -c constraints and factor-conditional lines (py38: x) are skipped
        out.append(Requirement(line, "tox.ini [testenv] deps"))
    return out


def _setup_cfg(root: Path) -> tuple[list[str], dict[str, list[str]], str]:
    """setup.cfg's install_requires, extras_require and project name (empty when absent)."""
    path = root / "setup.cfg"
    if not path.is_file():
        return [], {}, ""
    parser = configparser.ConfigParser(interpolation=None)
    try:
        parser.read(path)
    except configparser.Error as e:
        raise EnvError(f"setup.cfg cannot be read: {e}") from e

    def lines(text: str) -> list[str]:
        return [ln.split("#", 1)[0].strip() for ln in text.splitlines() if ln.split("#", 1)[0].strip()]

    deps = lines(parser.get("options", "install_requires", fallback=""))
    extras = (
        {k: lines(v) for k, v in parser.items("options.extras_require")}
        if parser.has_section("options.extras_require")
        else {}
    )
    name = re.sub(r"[-_.]+", "-", parser.get("metadata", "name", fallback="")).lower()
    return deps, extras, name


def project_requirements(
    root: str | Path,
    *,
    extras: Sequence[str] | None = None,
    groups: Sequence[str] | None = None,
    requirement_files: Sequence[str | Path] | None = None,
) -> list[Requirement]:
    """The test requirements the project at `root` declares (see the module docstring).

    `extras`, `groups`, `requirement_files` replace the defaults of their kind (an empty list: none
    of that kind). Raises EnvError for a name or file the project does not have."""
    root = Path(root)
    data: dict = {}
    if (root / "pyproject.toml").is_file():
        try:
            data = tomllib.loads((root / "pyproject.toml").read_text())
        except tomllib.TOMLDecodeError as e:
            raise EnvError(f"pyproject.toml is not valid TOML: {e}") from e
    own = _own_name(data)
    out: list[Requirement] = []
    project = data.get("project", {})
    out += [Requirement(r, "pyproject.toml [project] dependencies") for r in project.get("dependencies", [])]
    declared = dict(project.get("optional-dependencies", {}))
    cfg_deps, cfg_extras, cfg_name = _setup_cfg(root)
    own = own or cfg_name
    out += [Requirement(r, "setup.cfg install_requires") for r in cfg_deps]
    origin = dict.fromkeys(declared, "pyproject.toml")
    for name, reqs in cfg_extras.items():
        if name not in declared:
            declared[name], origin[name] = reqs, "setup.cfg"

    chosen = _choose(extras, declared, "the project declares no extra")
    for name in chosen:
        out += [Requirement(r, f"{origin[name]} extra {name!r}") for r in declared[name]]

    dep_groups = data.get("dependency-groups", {})
    for name in _choose(groups, dep_groups, "pyproject.toml declares no dependency group"):
        out += [Requirement(r, f"pyproject.toml dependency group {name!r}") for r in _group(dep_groups, name)]

    if requirement_files is None:
        files = [root / f for f in _REQ_FILES if (root / f).is_file()]
        files = [f for f in files if "dev" not in f.name] or files  # dev files only as a fallback
    else:
        files = []
        for f in requirement_files:
            path = Path(f) if Path(f).is_absolute() else root / f
            if not path.is_file():
                raise EnvError(f"requirements file {f} does not exist in {root}")
            files.append(path)
    for f in files:
        out += _requirements_file(f, root)

    runtime = ("pyproject.toml [project] dependencies", "setup.cfg install_requires")
    test_named = any(r.source not in runtime for r in out)
    if not test_named and requirement_files is None:
        out += _tox_deps(root)
    seen: set[str] = set()
    unique = []
    for r in out:
        if r.text not in seen and not _is_self(r.text, own):
            seen.add(r.text)
            unique.append(r)
    return unique
