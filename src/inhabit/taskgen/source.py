"""Where a task build starts: a project folder, a git checkout or a source distribution (.tar.gz,
.zip), copied into a pristine tree; which of its files are code to mutate; how to run its tests.

The pristine copy leaves out version-control and build debris (.git, caches, .tox, build/, dist/),
so every task's workspace holds the project and nothing of its history (a `git log` in the
workspace must not show the fix).
"""

from __future__ import annotations

import hashlib
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

from inhabit.errors import InhabitError
from inhabit.grading.infra import is_test_path
from inhabit.taskgen.addopts import addopts_override

__all__ = ["BuildError", "code_files", "default_command", "prepare_source", "tree_hash"]

_SKIP_DIRS = {
    ".git", ".hg", ".svn", "__pycache__", ".tox", ".nox", ".eggs", ".pytest_cache", ".mypy_cache",
    ".ruff_cache", "build", "dist", ".venv", "venv", "node_modules", ".hypothesis",
}  # fmt: skip
_NON_CODE_DIRS = {"tests", "test", "testing", "docs", "doc", "examples", "example", "benchmarks", "bench"}
# Top-level folders of development helpers: release checks, reference implementations the tests
# compare against, maintenance scripts. A bug there is a bug in the tests' oracle or tooling, not
# in the library; inside a package (`pkg/tools/`) the same names are library code.
_TOP_LEVEL_TOOLING_DIRS = {"tools", "scripts", "script", "ci", "devtools", "benchmark"}


class BuildError(InhabitError):
    """A task build cannot start or go on (bad input, a test suite that does not run)."""


def _ignore(_dir: str, names: list[str]) -> set[str]:
    return {n for n in names if n in _SKIP_DIRS or n.endswith((".pyc", ".pyo"))}


def prepare_source(src: str | Path, dest: Path) -> Path:
    """Copy the project at `src` (folder, git checkout, .tar.gz/.tgz/.zip sdist) to `dest` (created,
    must not exist) and return `dest`. An archive's single top-level folder is stripped."""
    src = Path(src)
    if not src.exists():
        raise BuildError(f"{src} does not exist; give a project folder, a git checkout or an sdist (.tar.gz)")
    if src.is_dir():
        shutil.copytree(src, dest, ignore=_ignore, symlinks=True)
        return dest
    name = src.name.lower()
    with tempfile.TemporaryDirectory(prefix="inhabit-sdist-") as tmp:
        if name.endswith((".tar.gz", ".tgz", ".tar")):
            with tarfile.open(src) as tar:
                tar.extractall(tmp, filter="data")
        elif name.endswith(".zip"):
            with zipfile.ZipFile(src) as zf:
                for member in zf.namelist():
                    if member.startswith("/") or ".." in Path(member).parts:
                        raise BuildError(f"{src}: archive member {member!r} escapes the archive")
                zf.extractall(tmp)
        else:
            raise BuildError(f"{src} is neither a folder nor an sdist archive (.tar.gz, .tgz, .zip)")
        entries = list(Path(tmp).iterdir())
        top = entries[0] if len(entries) == 1 and entries[0].is_dir() else Path(tmp)
        shutil.copytree(top, dest, ignore=_ignore, symlinks=True)
    return dest


def _is_test_file(rel: Path) -> bool:
    return rel.name.startswith("test_") or rel.name.endswith("_test.py") or rel.name == "conftest.py"


def code_files(root: Path) -> list[str]:
    """Relative paths of the project's code files: .py files outside test, doc and example folders
    and top-level tooling folders (`tools/`, `scripts/`), not test modules, not setup.py / docs
    conf. Sorted."""
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if path.is_symlink() or any(p in _NON_CODE_DIRS or p.startswith(".") for p in rel.parts[:-1]):
            continue
        if len(rel.parts) > 1 and rel.parts[0] in _TOP_LEVEL_TOOLING_DIRS:
            continue
        if _is_test_file(rel) or rel.name in ("setup.py", "conf.py", "noxfile.py", "fabfile.py"):
            continue
        out.append(rel.as_posix())
    return out


def test_files(root: Path) -> list[str]:
    """Relative paths of the project's Python test code as grading names it (`is_test_path`:
    test modules, conftests, files under test folders), sorted: the files a graded run of the
    whole suite lists as the task's own."""
    return sorted(
        rel for p in root.rglob("*.py") if p.is_file() and is_test_path(rel := p.relative_to(root).as_posix())
    )


def default_command(root: Path, python: str = "python", *, plugins: bool = False) -> str:
    """The test command for the project at `root`: pytest from the sandbox's `python`, with `src/`
    on PYTHONPATH for a src layout and plugin autoload off unless `plugins` (about 3x faster
    start-up; turn plugins on for suites that need pytest-asyncio and friends), and the project's
    addopts less the options that only measure (`--cov...`, `--durations`, `--benchmark-...`;
    `taskgen.addopts`) where it has any.

    A bare `python` keeps the task directory portable: inside every sandbox it is the task's
    environment (first on PATH) or inhabit's own interpreter, wherever either lives on the host
    that grades it. A path of the building machine here would break the task anywhere else."""
    py = python
    parts = []
    if not plugins:
        parts.append("PYTEST_DISABLE_PLUGIN_AUTOLOAD=1")
    if (root / "src").is_dir() and not any((root / d / "__init__.py").is_file() for d in _top_packages(root)):
        parts.append("PYTHONPATH=src:$PYTHONPATH")
    parts.append(f"{py} -m pytest -q -p no:cacheprovider")
    override, _ = addopts_override(root)
    if override:  # coverage, timing and report options of the project's addopts: see taskgen.addopts
        parts.append(override)
    return " ".join(parts)


def _top_packages(root: Path) -> list[str]:
    return [p.name for p in root.iterdir() if p.is_dir() and p.name not in ("src", *_NON_CODE_DIRS)]


def tree_hash(root: Path) -> str:
    """A content hash of a tree (paths and bytes): identifies the project a build state belongs to."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.is_symlink():
            h.update(path.relative_to(root).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()[:16]
