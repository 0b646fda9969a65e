"""A task with an [environment]: task check and grading run its tests in the environment (bwrap
and process backends), the task directory stays portable, and the environment is read-only to
the agent and to the graded code (a cheat that rewrites a package in it gets nothing)."""

from __future__ import annotations

import hashlib
import shutil

import pytest

from inhabit.envs.store import EnvStore
from inhabit.envs.task_env import task_environment
from inhabit.grading.check import check_task
from inhabit.grading.grader import grade
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.sandbox.bwrap import bwrap_problem
from inhabit.tasks.task import load_task

needs_bwrap = pytest.mark.skipif(bwrap_problem() is not None, reason=f"bwrap: {bwrap_problem()}")


def _digest(path):
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file() and not p.is_symlink():
            h.update(p.read_bytes())
    return h.hexdigest()


async def test_task_check_uses_the_environment_and_names_it_when_missing(dep_task, sandbox_provider):
    report = await check_task(dep_task(), sandbox_provider)
    assert report.valid, report.problem_lines()
    assert report.before["reward"] == 0.0 and report.after["reward"] == 1.0
    bare = await check_task(dep_task(with_env=False, name="bare"), sandbox_provider)
    assert [p.kind for p in bare.problems] == ["cannot_run"]
    assert (
        bare.problems[0].detail["missing_module"] == "tinydep" and "[environment]" in bare.problems[0].message
    )


async def test_a_task_with_an_environment_moved_elsewhere_checks_the_same(
    dep_task, tmp_path, sandbox_provider
):
    root = dep_task()
    toml = (root / "task.toml").read_text()
    assert (
        str(tmp_path) not in toml
        and "/bin/python" not in toml
        and 'lock = "environment/requirements.lock"' in toml
    )
    moved = tmp_path / "other" / "place"
    shutil.move(str(root), moved)
    report = await check_task(moved, sandbox_provider)
    assert report.valid, report.problem_lines()


async def test_a_missing_lock_file_is_a_format_problem(dep_task, sandbox_provider):
    root = dep_task()
    (root / "environment" / "requirements.lock").unlink()
    report = await check_task(root, sandbox_provider)
    assert [p.kind for p in report.problems] == ["format"]
    assert "names the lock file environment/requirements.lock, which is missing" in report.problems[0].message


@needs_bwrap
async def test_bwrap_check_and_the_agents_write_into_the_environment_fails(dep_task):
    task = load_task(dep_task())
    provider = create_provider(SandboxConfig(backend="bwrap"))
    try:
        report = await check_task(task.root, provider)
        assert report.valid, report.problem_lines()
        built = await task_environment(task)
        before = _digest(built.path)
        async with await provider.create(task.workspace_dir, env=built.path) as sb:
            res = await sb.exec("command -v python; python -c 'import tinydep, sys; print(sys.prefix)'")
            assert res.stdout.split() == ["/opt/env/bin/python", "/opt/env"], res
            mountinfo = (await sb.exec("cat /proc/self/mountinfo")).stdout
            assert " /opt/env ro," in mountinfo and str(built.path.parent) not in mountinfo  # no host path
            site = "$(python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))')"
            for cmd in (
                f"echo 'import os' > {site}/sitecustomize.py",
                f"echo 'import os' > {site}/zz.pth",
                f"echo 'def double(x): return 0' > {site}/tinydep/__init__.py",
                "rm -f /opt/env/bin/python",
                "mkdir /opt/env/x",
            ):
                res = await sb.exec(cmd)
                assert res.exit_code != 0 and "Read-only file system" in res.stderr, (cmd, res)
        assert _digest(built.path) == before
    finally:
        await provider.close()


CHEAT = (
    "site=$(python -c 'import sysconfig; print(sysconfig.get_path(\"purelib\"))'); "
    "printf 'def double(x):\\n    return 3 * x if x == 3 else 2 * x\\n' > $site/tinydep/__init__.py"
)


@needs_bwrap
async def test_a_cheat_that_rewrites_a_package_in_the_environment_earns_nothing(dep_task):
    """The agent leaves quad.py buggy and instead edits tinydep inside the environment so the
    buggy code passes (double(3) = 9: 9 + 3 = 12). Were the environment writable, the edit would
    reach the store and so grading's fresh sandbox: reward 1. Read-only, it fails: reward 0."""
    task = load_task(dep_task())
    built = await task_environment(task)
    before = _digest(built.path)
    provider = create_provider(SandboxConfig(backend="bwrap"))
    try:
        async with await provider.create(task.workspace_dir, env=built.path) as agent:
            res = await agent.exec(CHEAT)
            assert res.exit_code != 0
            result = await grade(task, agent, provider)
        assert result.status == "graded" and result.reward == 0.0
        assert result.outcomes["tests/test_quad.py::test_quadruple"] == "failed"
        assert result.outcomes["tests/test_quad.py::test_dep"] == "passed"  # the environment was there
        assert _digest(built.path) == before and EnvStore().get(task.environment.id) == built.path
    finally:
        await provider.close()


def test_a_lock_edited_after_its_id_was_written_is_refused(dep_task):
    # The store reuses environments by id alone: a changed lock under the old id must not load.
    from inhabit.errors import TaskFormatError

    root = dep_task()
    lock = root / "environment" / "requirements.lock"
    lock.write_text(lock.read_text() + "# edited\n")
    with pytest.raises(TaskFormatError, match="id does not match"):
        load_task(root)


@needs_bwrap
async def test_a_sandbox_made_after_prune_and_rebuild_sees_the_rebuilt_environment(dep_task, tmp_path):
    # One provider outlives a prune and a rebuild of the same id (same path, new tree): its next
    # sandbox must mount the new tree, not a view of the removed one.
    task = load_task(dep_task())
    store = EnvStore(tmp_path / "store")
    provider = create_provider(SandboxConfig(backend="bwrap"))
    check = "python -c 'import tinydep; print(tinydep.double(2))'"
    try:
        built = await task_environment(task, store=store)
        async with await provider.create(task.workspace_dir, env=built.path) as sb:
            assert (await sb.exec(check)).stdout.strip() == "4"
        assert store.prune() == [task.environment.id]
        rebuilt = await task_environment(task, store=store)
        assert rebuilt.path == built.path and not rebuilt.reused
        async with await provider.create(task.workspace_dir, env=rebuilt.path) as sb:
            res = await sb.exec(check)
            assert res.stdout.strip() == "4", res
    finally:
        await provider.close()
