"""Task directories: the shipped example loads, and every format mistake is one clear TaskFormatError."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pydantic import ValidationError

from inhabit.errors import TaskFormatError
from inhabit.tasks.build import CALC_BUGGY, CALC_PATCH, write_calc_task
from inhabit.tasks.task import GradingSpec, load_task, node_id_file

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "tasks" / "demo-001"


def test_example_task_loads_as_designed():
    task = load_task(EXAMPLE)
    assert task.id == "demo-001"
    assert task.workspace_dir == EXAMPLE / "workspace"
    assert task.hidden_dir == EXAMPLE / "hidden"
    assert task.reference_patch == EXAMPLE / "reference.patch"
    assert task.grading is not None
    assert task.grading.command == "python -m pytest -q -p no:cacheprovider"
    assert "tests/test_calc.py::test_add" in task.grading.fail_to_pass
    assert task.grading.timeout_s == 120
    assert task.grading.test_files == ("tests/test_calc.py", "tests/test_hidden.py")
    # The builder and the shipped example are the same task.
    assert (EXAMPLE / "workspace" / "calc.py").read_text() == CALC_BUGGY
    assert (EXAMPLE / "reference.patch").read_text() == CALC_PATCH
    assert load_task(EXAMPLE / "task.toml").id == "demo-001"


def test_task_and_spec_are_frozen(tmp_path):
    task = load_task(write_calc_task(tmp_path / "t"))
    with pytest.raises(dataclasses.FrozenInstanceError):
        task.id = "x"  # type: ignore[misc]
    with pytest.raises(ValidationError):
        task.grading.timeout_s = 1  # type: ignore[union-attr]


def test_hidden_files_never_inside_workspace(tmp_path):
    task = load_task(write_calc_task(tmp_path / "t"))
    assert task.hidden_files() == ["tests/test_hidden.py"]
    assert "tests/test_hidden.py" not in task.workspace_files()
    assert task.hidden_dir is not None and task.workspace_dir not in task.hidden_dir.parents


def _write(root: Path, toml: str, files: dict[str, str] | None = None) -> Path:
    (root / "workspace").mkdir(parents=True, exist_ok=True)
    (root / "task.toml").write_text(toml)
    for rel, text in (files or {"workspace/tests/test_a.py": "def test_a():\n    pass\n"}).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


GOOD = 'id = "t1"\ninstruction = "fix"\n[grading]\nfail_to_pass = ["tests/test_a.py::test_a"]\n'


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('instruction = "x"\n', "id"),
        ('id = "t"\ninstruction = "x"\nauthor = "me"\n', "author"),
        ('id = "t"\ninstruction = "   "\n', "blank"),
        ('id = "has space"\ninstruction = "x"\n', "letters, digits"),
        ('id = "t"\ninstruction = "x"\n[grading]\ntimeout = 3\n', "timeout"),
        ('id = "t"\ninstruction = "x"\n[grading]\ntimeout_s = 0\n', "timeout_s"),
        ('id = "t"\ninstruction = "x"\n[grading]\nfail_to_pass = ["test_add"]\n', "node id"),
        ('id = "t"\ninstruction = "x"\n[grading]\npass_to_pass = ["../x.py::t"]\n', "relative"),
        ('id = "t"\ninstruction = "x"\n[grading]\nfail_to_pass = ["tests/test_b.py::t"]\n', "neither"),
        ('id = "t"\ninstruction = "x"\n[grading\n', "not valid TOML"),
        ('id = "t"\ninstruction = "x"\n[sandbox]\nmemory = 512\n', "memory"),
        ('id = "t"\ninstruction = "x"\n[sandbox]\nmax_processes = 1\n', "max_processes"),
    ],
)
def test_format_mistakes_say_what_to_fix(tmp_path, toml, message):
    root = _write(tmp_path / "t", toml)
    with pytest.raises(TaskFormatError, match=message):
        load_task(root)


def test_valid_minimal_task(tmp_path):
    task = load_task(_write(tmp_path / "t", GOOD))
    assert task.hidden_dir is None and task.reference_patch is None
    assert task.grading.required_tests == ("tests/test_a.py::test_a",)


def test_missing_pieces(tmp_path):
    with pytest.raises(TaskFormatError, match="does not exist"):
        load_task(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(TaskFormatError, match=r"no task\.toml"):
        load_task(tmp_path / "empty")
    root = tmp_path / "nows"
    root.mkdir()
    (root / "task.toml").write_text('id = "t"\ninstruction = "x"\n')
    with pytest.raises(TaskFormatError, match="workspace/"):
        load_task(root)


def test_symlink_from_workspace_to_hidden_is_refused(tmp_path):
    root = _write(tmp_path / "t", GOOD)
    (root / "hidden").mkdir()
    (root / "hidden" / "secret.py").write_text("SECRET = 1\n")
    (root / "workspace" / "peek.py").symlink_to(root / "hidden" / "secret.py")
    with pytest.raises(TaskFormatError, match="outside workspace"):
        load_task(root)


def test_symlink_inside_workspace_is_fine(tmp_path):
    root = _write(tmp_path / "t", GOOD)
    (root / "workspace" / "alias.py").symlink_to("tests/test_a.py")
    assert load_task(root).id == "t1"


def test_hidden_must_not_hold_symlinks(tmp_path):
    root = _write(tmp_path / "t", GOOD)
    (root / "hidden").mkdir()
    (root / "hidden" / "x.py").symlink_to("/etc/hostname")
    with pytest.raises(TaskFormatError, match="symlinks"):
        load_task(root)


def test_duplicate_node_ids_are_refused():
    with pytest.raises(ValidationError, match="twice"):
        GradingSpec(fail_to_pass=["a.py::t", "a.py::t"])


def test_node_id_file():
    assert node_id_file("tests/test_a.py::TestX::test_y[1-2]") == "tests/test_a.py"


def test_sandbox_table_sets_limits_over_the_run(tmp_path):
    from inhabit.sandbox import SandboxLimits

    task = load_task(_write(tmp_path / "t", GOOD + "[sandbox]\nmemory_mb = 8192\ncpu_time_s = 77\n"))
    run = SandboxLimits(memory_mb=1024, max_processes=99)
    limits = task.sandbox.over(run)
    assert (limits.memory_mb, limits.cpu_time_s, limits.max_processes) == (8192, 77, 99)
    assert load_task(_write(tmp_path / "u", GOOD)).limits(object()) is None


async def test_sandbox_table_reaches_episode_and_grading(make_task, sandbox_provider):
    """A task's [sandbox] limits apply in the sandbox the agent works in and in grading's."""
    from inhabit.grading.grader import grade

    check = (
        "import resource\n\ndef test_cpu():\n    assert resource.getrlimit(resource.RLIMIT_CPU)[0] == 77\n"
    )
    task = make_task(workspace={"tests/test_l.py": check}, pass_to_pass=["tests/test_l.py::test_cpu"])
    with (task.root / "task.toml").open("a") as f:
        f.write("\n[sandbox]\ncpu_time_s = 77\n")
    task = load_task(task.root)
    sandbox = await sandbox_provider.create(task.workspace_dir, limits=task.limits(sandbox_provider))
    try:
        r = await sandbox.exec("ulimit -S -t")
        assert r.stdout.strip() == "77"
        result = await grade(task, sandbox, sandbox_provider)
    finally:
        await sandbox.close()
    assert result.reward == 1.0, result.details
