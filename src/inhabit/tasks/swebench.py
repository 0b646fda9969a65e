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
a crash of the import. Setting up each repository's dependencies is not part of this: give
--command a test command that works for the repositories in the file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from inhabit.errors import TaskFormatError
from inhabit.tasks.build import write_task
from inhabit.tasks.source import BuildError, default_command
from inhabit.tasks.task import load_task

__all__ = ["ImportReport", "import_swebench"]


@dataclass
class ImportReport:
    tasks: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


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


def import_swebench(
    file: str | Path, repos: str | Path, out: str | Path, *, command: str | None = None
) -> ImportReport:
    """Import every instance of the JSONL `file`; see the module docstring."""
    report = ImportReport()
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
            report.tasks.append(_import_one(inst, Path(repos), out, command))
        except (BuildError, TaskFormatError, ValueError, OSError, subprocess.SubprocessError) as e:
            report.skipped[key] = f"{type(e).__name__}: {e}"[:600]
    return report
