"""`inhabit tasks import-swebench FILE.jsonl --repos DIR --out DIR`: SWE-bench-format instances
(instance_id, repo, base_commit, problem_statement, patch, test_patch, FAIL_TO_PASS, PASS_TO_PASS)
with local git clones become task directories:

    workspace/        the repository's tracked files at base_commit (`git archive`: no history)
    hidden/           every file the test_patch adds or changes, in its patched form
    reference.patch   the instance's gold patch
    task.toml         instruction = problem_statement; the FAIL_TO_PASS / PASS_TO_PASS node ids

The clone of `owner/name` is looked up in --repos as `owner__name`, `name` or `owner/name`.
Instances that cannot be imported (no clone, unknown commit, a test patch that does not apply,
test ids that are not pytest node ids as in Django's runner) are skipped with a reason, never
a crash of the import.

Each task gets an `[environment]` (unless `env=False`): the test requirements the repository
declares at the instance's `environment_setup_commit` (else `base_commit`), read as
`inhabit.envs.requirements` reads them (pyproject.toml, setup.cfg, requirements files, tox.ini),
plus, for a project with a setup.py whose static files name no test extra, what its build
backend reports (`inhabit.envs.backend`: install_requires and the test extra of setup.py; this
runs the repository's setup.py on the host), locked once per repository, commit and Python.

The Python version is the instance's own `python` field (e.g. "3.8"), else `python=` (the
CLI's --python), else inhabit's own; the environment is built with that interpreter where this
machine has it (`inhabit.envs.pythons`). SWE-bench's `version` field is the project's release
(e.g. "2.19"), not a Python version, so it is not read. The report lists, per instance, the
environment it got (id and Python) or why it got none (one line: a requirement that does not
resolve, a Python the machine lacks, ...).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from inhabit.errors import TaskFormatError
from inhabit.taskgen.source import BuildError, default_command
from inhabit.tasks.build import write_task
from inhabit.tasks.task import load_task

__all__ = ["ImportReport", "import_swebench"]


@dataclass
class ImportReport:
    tasks: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)
    environments: dict[str, str] = field(default_factory=dict)
    """Instance id -> "<environment id> (python X.Y)" for the environment its task got, or
    "none: <why>"."""


def _ids(value: object) -> list[str]:
    if isinstance(value, str):
        value = json.loads(value) if value.strip() else []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError("FAIL_TO_PASS / PASS_TO_PASS must be lists of test ids (or JSON strings of them)")
    return value


def _clone(repos: Path, repo: str) -> Path | None:
    owner, _, name = repo.partition("/")
    for cand in (
        repos / f"{owner}__{name}",
        repos / name,
        repos / owner / name,
        repos / repo.replace("/", "__"),
    ):
        if (cand / ".git").exists():
            return cand
    return None


def _git(args: list[str], cwd: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, timeout=300)


def _import_one(inst: dict, repos: Path, out: Path, command: str | None) -> str:
    iid = inst["instance_id"]
    task_id = "".join(c if c.isalnum() or c in "._-" else "-" for c in iid)
    clone = _clone(repos, inst["repo"])
    if clone is None:
        raise BuildError(f"no git clone of {inst['repo']} under {repos} (as owner__name, name or owner/name)")
    root = out / task_id
    if root.exists():
        shutil.rmtree(root)
    with tempfile.TemporaryDirectory(prefix="inhabit-swe-") as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        archive = _git(["archive", "--format=tar", inst["base_commit"]], clone)
        if archive.returncode != 0:
            raise BuildError(f"git archive {inst['base_commit']} failed: {archive.stderr.decode()[-300:]}")
        subprocess.run(["tar", "-x", "-C", str(ws)], input=archive.stdout, check=True, timeout=300)
        patched = Path(tmp) / "patched"
        shutil.copytree(ws, patched, symlinks=True)
        test_patch = inst.get("test_patch") or ""
        hidden: dict[str, bytes] = {}
        if test_patch.strip():
            applied = _git(["apply", "--numstat", "--apply", "-"], patched, test_patch.encode())
            if applied.returncode != 0:
                raise BuildError(
                    f"test_patch does not apply at base_commit: {applied.stderr.decode()[-300:]}"
                )
            for line in applied.stdout.decode().splitlines():
                path = line.split("\t")[-1]
                if (patched / path).is_file():
                    hidden[path] = (patched / path).read_bytes()
        shutil.copytree(ws, root / "workspace", symlinks=True)
    write_task(
        root,
        id=task_id,
        instruction=inst["problem_statement"].strip() or f"Fix issue {iid}.",
        workspace={},
        hidden=hidden,
        fail_to_pass=_ids(inst.get("FAIL_TO_PASS", [])),
        pass_to_pass=_ids(inst.get("PASS_TO_PASS", [])),
        command=command or default_command(root / "workspace"),
        timeout_s=900,
        reference_patch=inst.get("patch") or "",
    )
    try:
        load_task(root)
    except TaskFormatError:
        shutil.rmtree(root)
        raise
    return task_id


def _environment(
    inst: dict, repos: Path, root: Path, python: str | None, wheelhouse: str | Path | None, locks: dict
) -> str:
    """Lock the requirements declared at the instance's setup commit into the task; returns
    "<id> (python X.Y)", or "none: <why>"."""
    from inhabit.envs.backend import backend_requirements
    from inhabit.envs.lock import lock_requirements, own_python
    from inhabit.envs.pythons import find_python
    from inhabit.envs.requirements import project_requirements
    from inhabit.envs.task_env import write_environment
    from inhabit.errors import EnvError

    commit = inst.get("environment_setup_commit") or inst["base_commit"]
    version = inst.get("python") or python or own_python()
    key = (inst["repo"], commit, str(version))
    if key not in locks:
        try:
            if not isinstance(version, str):  # JSON 3.10 is the number 3.1
                raise EnvError(f'the python field must be a string such as "3.10", not {version!r}')
            find_python(version)  # a Python this machine lacks: one line, before any resolving
            with tempfile.TemporaryDirectory(prefix="inhabit-swe-env-") as tmp:
                clone = _clone(repos, inst["repo"])
                assert clone is not None  # _import_one found it
                archive = _git(["archive", "--format=tar", commit], clone)
                if archive.returncode != 0:
                    raise EnvError(f"git archive {commit} failed: {archive.stderr.decode()[-200:]}")
                subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True, timeout=300)
                reqs = project_requirements(tmp)
                if not any(" extra " in r.source for r in reqs):  # setup.py may declare them
                    reqs = backend_requirements(tmp, python=version, wheelhouse=wheelhouse) + reqs
            if not reqs:
                raise EnvError(f"the repository declares no test requirements at {commit[:12]}")
            locks[key] = ("ok", lock_requirements(reqs, python=version, wheelhouse=wheelhouse))
        except EnvError as e:
            locks[key] = ("none", str(e))
    kind, text = locks[key]
    if kind == "none":
        return f"none: {text}"
    return f"{write_environment(root, text, version)} (python {version})"


def import_swebench(
    file: str | Path,
    repos: str | Path,
    out: str | Path,
    *,
    command: str | None = None,
    env: bool = True,
    python: str | None = None,
    wheelhouse: str | Path | None = None,
) -> ImportReport:
    """Import every instance of the JSONL `file`; see the module docstring."""
    report = ImportReport()
    locks: dict = {}
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for n, line in enumerate(Path(file).read_text().splitlines(), 1):
        if not line.strip():
            continue
        key = f"line {n}"
        try:
            inst = json.loads(line)
            key = str(inst.get("instance_id") or key)
            missing = [
                k for k in ("instance_id", "repo", "base_commit", "problem_statement") if not inst.get(k)
            ]
            if missing:
                raise BuildError(f"missing field(s) {missing}")
            task_id = _import_one(inst, Path(repos), out, command)
            report.tasks.append(task_id)
            if env:
                report.environments[key] = _environment(
                    inst, Path(repos), out / task_id, python, wheelhouse, locks
                )
        except (BuildError, TaskFormatError, ValueError, OSError, subprocess.SubprocessError) as e:
            report.skipped[key] = f"{type(e).__name__}: {e}"[:600]
    return report
