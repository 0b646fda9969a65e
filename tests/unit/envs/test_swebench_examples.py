"""The SWE-bench-format instances shipped in examples/swebench (made from marshmallow's history
by its make_instances.py): their repository bundle holds every commit they name, they import
without a skip, and (slow, needs PyPI: pytest for Python 3.8, pytz, simplejson, python-dateutil)
each imported task gets its environment, for the Python it names, and passes task check."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from inhabit.envs.pythons import find_python
from inhabit.errors import EnvError
from inhabit.grading.check import check_task
from inhabit.taskgen.swebench import import_swebench
from inhabit.tasks.task import load_task

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "swebench"


def _repos(tmp_path: Path) -> Path:
    repos = tmp_path / "repos"
    repos.mkdir()
    subprocess.run(["git", "clone", "-q", str(EXAMPLES / "repos.bundle"), str(repos / "marshmallow-code__marshmallow")],
                   check=True, capture_output=True)  # fmt: skip
    return repos


def _instances() -> list[dict]:
    return [json.loads(line) for line in (EXAMPLES / "instances.jsonl").read_text().splitlines()]


def test_shipped_instances_import_offline(tmp_path):
    instances = _instances()
    assert len(instances) >= 5 and {i["python"] for i in instances} >= {"3.8"}
    assert all(i["FAIL_TO_PASS"] and i["patch"] and i["test_patch"] for i in instances)
    report = import_swebench(EXAMPLES / "instances.jsonl", _repos(tmp_path), tmp_path / "out", env=False)
    assert not report.skipped and len(report.tasks) == len(instances)
    for inst, task_id in zip(instances, report.tasks, strict=True):
        task = load_task(tmp_path / "out" / task_id)
        assert list(task.grading.fail_to_pass) == inst["FAIL_TO_PASS"] and (task.root / "hidden").is_dir()


@pytest.mark.slow
async def test_shipped_instances_get_environments_and_check(tmp_path, env_cache, sandbox_provider):
    for version in {i["python"] for i in _instances()}:
        try:
            find_python(version)
        except EnvError as e:
            pytest.skip(str(e))
    report = import_swebench(EXAMPLES / "instances.jsonl", _repos(tmp_path), tmp_path / "out")
    assert not report.skipped
    for inst in _instances():
        got = report.environments[inst["instance_id"]]
        assert got.startswith("sha256:") and got.endswith(f"(python {inst['python']})"), got
    for task_id in report.tasks:
        check = await check_task(tmp_path / "out" / task_id, sandbox_provider)
        assert check.valid, (task_id, check.problem_lines())
