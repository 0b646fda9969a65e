"""Task directories (docs/architecture.md, "Task directory"): loading and strict validation.

    <task>/task.toml        id, instruction, [grading]
    <task>/workspace/       the repository as the agent first sees it
    <task>/hidden/          laid over the final workspace at grading only (never shown to the agent)
    <task>/reference.patch  optional: a fix (unified diff, -p1) that `inhabit tasks check` applies
    <task>/environment/     optional: the lock of the task's test environment (`[environment]`)

`load_task` returns a frozen `Task`; every problem raises `TaskFormatError` with a message that
says what to fix. Structural guarantees checked here (and relied on by grading): `hidden/` is a
sibling of `workspace/`, never inside it, and `workspace/` holds no symlink that points outside
itself, so a sandbox created from `workspace_dir` cannot contain a hidden file.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator

from inhabit.config import Config, read_toml
from inhabit.envs.lock import ENV_ID_PATTERN, env_id
from inhabit.errors import ConfigError, TaskFormatError
from inhabit.sandbox.base import SandboxLimits

__all__ = ["EnvironmentSpec", "GradingSpec", "Task", "TaskFormatError", "load_task", "node_id_file"]

_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def node_id_file(node_id: str) -> str:
    """The file part of a pytest node id: `tests/test_calc.py::test_add[1]` -> `tests/test_calc.py`."""
    return node_id.split("::", 1)[0]


def _check_node_id(node_id: str) -> str:
    file_part, sep, rest = node_id.partition("::")
    if not sep or not rest or not file_part.endswith(".py"):
        raise ValueError(
            f"{node_id!r} is not a pytest node id; write it as path/to/test_file.py::test_name "
            "(or ::TestClass::test_name, or ::test_name[param])"
        )
    path = PurePosixPath(file_part)
    if path.is_absolute() or ".." in path.parts or "\\" in file_part:
        raise ValueError(f"{node_id!r}: the file part must be a relative '/'-separated path inside the task")
    return node_id


class GradingSpec(Config):
    """The `[grading]` table of task.toml."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    command: str = Field(
        "python -m pytest -q -p no:cacheprovider",
        min_length=1,
        description="Test command run in the graded copy's workspace root. It must end in a pytest "
        "invocation: grading appends options and test file paths to it.",
    )
    fail_to_pass: tuple[str, ...] = Field(
        (), description="Node ids that fail on the original workspace and must pass after the fix."
    )
    pass_to_pass: tuple[str, ...] = Field((), description="Node ids that pass before and must keep passing.")
    timeout_s: float = Field(120.0, gt=0, le=3600, description="Wall-clock limit of one grading run.")

    @field_validator("fail_to_pass", "pass_to_pass")
    @classmethod
    def _node_ids(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for node_id in value:
            _check_node_id(node_id)
        if len(set(value)) != len(value):
            raise ValueError("lists a node id twice")
        return value

    @property
    def required_tests(self) -> tuple[str, ...]:
        """fail_to_pass then pass_to_pass: every test that must pass for reward 1."""
        return self.fail_to_pass + self.pass_to_pass

    @property
    def test_files(self) -> tuple[str, ...]:
        """The distinct files of the required tests, in first-seen order."""
        return tuple(dict.fromkeys(node_id_file(n) for n in self.required_tests))


class TaskSandbox(Config):
    """The optional `[sandbox]` table of task.toml: limits this task's suite needs, over the run's
    `sandbox.limits` (each absent key keeps the run's value). For the sandboxes of the episode and
    of grading alike."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    memory_mb: int | None = Field(None, ge=16, le=1 << 20, description="Memory of all processes together.")
    max_processes: int | None = Field(None, ge=4, le=1 << 20, description="Processes and threads at once.")
    cpu_time_s: int | None = Field(None, ge=1, description="Soft RLIMIT_CPU of each command.")
    disk_mb: int | None = Field(None, ge=1, le=1 << 20, description="Bytes written into the workspace.")

    def over(self, base: SandboxLimits | None) -> SandboxLimits:
        """`base` (default limits when None) with this table's values in place."""
        return (base or SandboxLimits()).model_copy(update=self.model_dump(exclude_none=True))


def provider_limits(provider: object) -> SandboxLimits | None:
    """A provider's default limits, looking through wrappers (`inner`); None if it has none."""
    for _ in range(8):
        limits = getattr(provider, "limits", None)
        if isinstance(limits, SandboxLimits):
            return limits
        provider = getattr(provider, "inner", None)
        if provider is None:
            break
    return None


class EnvironmentSpec(Config):
    """The optional `[environment]` table: the task's own test environment (docs/environments.md).
    Absent: the tests run with inhabit's own Python."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    python: str = Field(pattern=r"^3\.\d{1,2}$", description="Python version the lock was made for (3.11).")
    lock: str = Field(
        "environment/requirements.lock",
        description="The lock file (exact pins, hashes), relative to the task.",
    )
    id: str = Field(pattern=ENV_ID_PATTERN, description="Digest of python + lock: the store's key.")

    @field_validator("lock")
    @classmethod
    def _relative(cls, value: str) -> str:
        path = PurePosixPath(value)
        if path.is_absolute() or ".." in path.parts or "\\" in value or not value:
            raise ValueError("must be a relative '/'-separated path inside the task directory")
        if path.parts[0] in ("workspace", "hidden"):
            raise ValueError("must not lie in workspace/ or hidden/ (the agent or the tests would see it)")
        return value


class TaskToml(Config):
    """The whole task.toml."""

    id: str = Field(description="Task id: letters, digits, '.', '_' and '-' (at most 128).")
    instruction: str = Field(min_length=1, description="What the agent is asked to do.")
    grading: GradingSpec | None = Field(None, description="How the final workspace is graded.")
    sandbox: TaskSandbox | None = Field(None, description="Limits this task needs (see TaskSandbox).")
    environment: EnvironmentSpec | None = Field(None, description="The task's test environment (optional).")

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if not _ID_RE.match(value):
            raise ValueError("must be letters, digits, '.', '_' or '-', starting with a letter or digit")
        return value

    @field_validator("instruction")
    @classmethod
    def _instruction(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


@dataclass(frozen=True)
class Task:
    """A loaded task directory. Paths are absolute host paths."""

    id: str
    instruction: str
    root: Path
    workspace_dir: Path
    hidden_dir: Path | None
    reference_patch: Path | None
    grading: GradingSpec | None
    sandbox: TaskSandbox | None = None
    environment: EnvironmentSpec | None = None

    @property
    def environment_lock(self) -> Path | None:
        """The host path of the `[environment]` lock file (None without one)."""
        return self.root / self.environment.lock if self.environment is not None else None

    def limits(self, provider: object) -> SandboxLimits | None:
        """The limits for this task's sandboxes from `provider` (None: the provider's own)."""
        if self.sandbox is None:
            return None
        return self.sandbox.over(provider_limits(provider))

    def hidden_files(self) -> list[str]:
        """Relative '/'-separated paths of every file under hidden/ (sorted)."""
        return _walk_files(self.hidden_dir) if self.hidden_dir else []

    def workspace_files(self) -> list[str]:
        """Relative '/'-separated paths of every file under workspace/ (sorted)."""
        return _walk_files(self.workspace_dir)


def _walk_files(top: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        rel = Path(dirpath).relative_to(top)
        for name in filenames:
            out.append((rel / name).as_posix())
        # Symlinked directories are listed as entries (os.walk does not follow them by default).
        out.extend((rel / d).as_posix() for d in dirnames if (Path(dirpath) / d).is_symlink())
    return sorted(out)


def _check_no_escaping_symlinks(top: Path, label: str) -> None:
    real_top = top.resolve()
    for dirpath, dirnames, filenames in os.walk(top):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                target = p.resolve()
                if target != real_top and real_top not in target.parents:
                    raise TaskFormatError(
                        f"{label}/{p.relative_to(top).as_posix()} is a symlink to {os.readlink(p)!r}, "
                        f"outside {label}/; replace it with the file itself"
                    )


def load_task(path: str | Path) -> Task:
    """Load and validate a task directory (or the path of its task.toml)."""
    root = Path(path)
    if root.name == "task.toml" and root.is_file():
        root = root.parent
    root = root.resolve()
    if root.exists() and not root.is_dir():
        raise TaskFormatError(f"{path} is a file, not a task directory (holding task.toml, workspace/)")
    if not root.is_dir():
        raise TaskFormatError(f"task directory {path} does not exist")
    toml_path = root / "task.toml"
    if not toml_path.is_file():
        raise TaskFormatError(f"{root} has no task.toml; create one with id, instruction and [grading]")
    try:
        data: dict[str, Any] = read_toml(toml_path)
    except ConfigError as e:
        raise TaskFormatError(str(e)) from e
    try:
        spec = TaskToml.model_validate(data)
    except ValidationError as e:
        lines = [f"  {'.'.join(str(p) for p in err['loc']) or '(root)'}: {err['msg']}" for err in e.errors()]
        raise TaskFormatError(f"invalid {toml_path}:\n" + "\n".join(lines)) from e

    workspace = root / "workspace"
    if not workspace.is_dir() or workspace.is_symlink():
        raise TaskFormatError(f"{root} has no workspace/ directory (the repository the agent starts from)")
    _check_no_escaping_symlinks(workspace, "workspace")
    hidden: Path | None = root / "hidden"
    assert hidden is not None
    if hidden.is_symlink() or (hidden.exists() and not hidden.is_dir()):
        raise TaskFormatError(f"{hidden} must be a plain directory (not a symlink or a file)")
    if not hidden.exists():
        hidden = None
    else:
        for dirpath, dirnames, filenames in os.walk(hidden):
            for name in dirnames + filenames:
                if (Path(dirpath) / name).is_symlink():
                    raise TaskFormatError(f"hidden/ must not contain symlinks: {Path(dirpath) / name}")
    patch = root / "reference.patch"
    if patch.exists() and not patch.is_file():
        raise TaskFormatError(f"{patch} must be a file (a unified diff applied with patch -p1)")

    task = Task(
        id=spec.id,
        instruction=spec.instruction,
        root=root,
        workspace_dir=workspace,
        hidden_dir=hidden,
        reference_patch=patch if patch.is_file() else None,
        grading=spec.grading,
        sandbox=spec.sandbox,
        environment=spec.environment,
    )
    if spec.environment is not None:
        lock = root / spec.environment.lock
        if not lock.is_file():
            raise TaskFormatError(
                f"{toml_path}: [environment] names the lock file {spec.environment.lock}, which is missing; "
                "restore it or lock again (inhabit env lock)"
            )
        # The store reuses an environment by id alone: a lock edited after its id was written
        # would silently run the old environment.
        if env_id(spec.environment.python, lock.read_bytes()) != spec.environment.id:
            raise TaskFormatError(
                f"{toml_path}: [environment] id does not match {spec.environment.lock} (the lock changed "
                "after the id was written); lock again (inhabit env lock)"
            )
    if spec.grading is not None:
        present = set(task.workspace_files()) | set(task.hidden_files())
        for file in spec.grading.test_files:
            if file not in present:
                raise TaskFormatError(
                    f"{toml_path}: test file {file} (from [grading] node ids) exists in neither "
                    "workspace/ nor hidden/; fix the node id or add the file"
                )
    return task
