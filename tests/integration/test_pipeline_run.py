"""`inhabit train` end to end on a tiny model: both modes, metrics, trajectories, --resume.

Real parts throughout: generated quickstart tasks, a tiny model built from a spec, the embedded
engine, the harness, sandboxes and grading. The model is random, so rewards are all 0; the
config trains zero-advantage groups anyway (`rollout.train_zero_advantage`) so that every step
runs the trainer, publishes a version and swaps it into the engine.
"""

from __future__ import annotations

import json
import os

import pytest
from typer.testing import CliRunner

from inhabit.cli import app
from run_fixtures import tiny_run


def write_config(tmp_path, mode: str, steps: int, waves: bool = False) -> str:
    changes = {"mode": mode, "steps": steps, "metrics": {"tensorboard": True}}
    if waves:
        changes["rollout"] = {"waves": True}
    return tiny_run(tmp_path, changes, name=f"run-{mode}")[0]


def records(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("mode", ["async", "sync", "async-waves"])
def test_train_runs_and_writes_metrics_and_trajectories(tmp_path, mode):
    mode, _, waves = mode.partition("-")
    result = CliRunner().invoke(app, ["train", write_config(tmp_path, mode, 2, waves=bool(waves))])
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / f"run-{mode}"
    steps = [r for r in records(run_dir) if "version" in r and "eval" not in r]
    assert [r["step"] for r in steps] == [1, 2]
    assert steps[-1]["version"] == 2 and all(r["updated"] for r in steps)
    for r in steps:
        assert r["mode"] == mode and r["rollouts"] == 4
        assert r["policy_version_lag"]["max"] <= 1  # max_staleness
        assert {"mean", "std", "hist"} <= set(r["reward"]) and "mismatch_mean_abs" in r["trainer"]
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    purposes = [t["metadata"]["purpose"] for t in trajs]
    summary = json.loads((run_dir / "summary.json").read_text())
    # Exactly the groups the run trains (2 steps x 2 tasks x 2 rollouts), plus regenerated stale
    # ones: async starts no group that the run ends before training.
    assert purposes.count("train") == 8 + 2 * summary["dropped_stale"]
    state = json.loads((run_dir / "checkpoints" / "v000002" / "trainer_state.json").read_text())
    assert state["data_state"]["groups_started"] == 4 + summary["dropped_stale"]
    assert purposes.count("eval:before") == 1 and purposes.count("eval:after") == 1
    trained = [t for t in trajs if t["metadata"]["purpose"] == "train" and t["segments"]]
    assert all(t["segments"][0]["turns"][0]["versions"] for t in trained)
    assert summary["version"] == 2 and set(summary["eval"]) == {"before", "after"}
    after = summary["eval"]["after"]
    evals = [t for t in trajs if t["metadata"]["purpose"] == "eval:after"]
    firsts = [(t["tool_calls"][0]["tool"] or "malformed") if t["tool_calls"] else "none" for t in evals]
    assert {k: v["rollouts"] for k, v in after["first_tool"].items()} == {k: firsts.count(k) for k in firsts}
    assert sum(v["share"] * v["success_rate"] for v in after["first_tool"].values()) == pytest.approx(
        after["success_rate"]
    )
    assert (run_dir / "checkpoints" / "v000002" / "trainer_state.json").is_file()
    assert any((run_dir / "tensorboard").iterdir())

    # rollout.grade_cache: a rollout graded from the cache has the outcomes of a rollout of its own
    # group that grading ran (the random model leaves most workspaces as they were: about half the
    # rollouts end in files graded before)
    def group(t: dict) -> tuple:
        return t["task_id"], t["metadata"]["purpose"], t["metadata"]["group"]

    graded = [t for t in trajs if t["grading"] and not t["grading"].get("cached")]
    cached = [t for t in trajs if t["grading"].get("cached")]
    assert cached
    for t in cached:
        assert any(
            group(g) == group(t) and g["grading"]["outcomes"] == t["grading"]["outcomes"] for g in graded
        )
    assert all("grading_cached" in r for r in steps)
    if mode == "sync":
        # lock-step: every token of a step's rollouts came from the version being trained
        assert all(r["policy_version_lag"]["max"] == 0 for r in steps)


def test_resume_continues_from_the_checkpoint(tmp_path):
    runner = CliRunner()
    assert runner.invoke(app, ["train", write_config(tmp_path, "async", 1)]).exit_code == 0
    run_dir = tmp_path / "run-async"
    result = runner.invoke(app, ["train", write_config(tmp_path, "async", 3), "--resume"])
    assert result.exit_code == 0, result.output
    steps = [r for r in records(run_dir) if "version" in r and "eval" not in r]
    assert [r["step"] for r in steps] == [1, 2, 3]
    assert [r["version"] for r in steps] == [1, 2, 3]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 3 and summary["version"] == 3
    # the resumed run did not evaluate "before" again: one before, one after (from the second run)
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert [t["metadata"]["purpose"] for t in trajs].count("eval:before") == 1


def test_resume_without_checkpoint_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(app, ["train", write_config(tmp_path, "sync", 1), "--resume"])
    assert result.exit_code != 0
    assert "no checkpoint" in str(result.exception)


def test_trainer_in_its_own_process(tmp_path):
    """placement.trainer = "process": samples go to a child process, weights come back; with CPUs
    pinned, the caller gets its CPU set back when the run ends."""
    config = write_config(tmp_path, "async", 2)
    cpus = sorted(os.sched_getaffinity(0))
    pins = (
        [f"placement.trainer_cpus=[{cpus[-1]}]", f"placement.rollout_cpus=[{cpus[0]}]"]
        if len(cpus) > 1
        else []
    )
    args = ["train", config, 'placement.trainer="process"', "eval.before=false", *pins]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert sorted(os.sched_getaffinity(0)) == cpus
    steps = [r for r in records(tmp_path / "run-async") if "version" in r and "eval" not in r]
    assert [r["version"] for r in steps] == [1, 2]
    assert steps[-1]["engine_version"] == 2  # the child's weights reached the engine


def test_stop_file_ends_the_run_after_a_step_and_resume_goes_on(tmp_path):
    """`touch <run_dir>/STOP`: the step in progress finishes, a checkpoint is written, no eval."""
    import threading
    import time

    run_dir = tmp_path / "run-async"
    config = write_config(tmp_path, "async", 500)  # would run for many minutes without the STOP
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(r=CliRunner().invoke(app, ["train", config])))
    thread.start()
    deadline = time.monotonic() + 300
    while not ((run_dir / "metrics.jsonl").exists() and any("version" in r for r in records(run_dir))):
        assert thread.is_alive() and time.monotonic() < deadline, out
        time.sleep(0.1)
    (run_dir / "STOP").touch()
    thread.join(300)
    assert not thread.is_alive() and out["r"].exit_code == 0, out["r"].output
    assert "stopped on request" in out["r"].output
    summary = json.loads((run_dir / "summary.json").read_text())
    stopped_at = summary["steps"]
    assert summary["stopped"] and 1 <= stopped_at < 500 and summary["version"] == stopped_at
    assert (run_dir / "checkpoints" / f"v{stopped_at:06d}").is_dir()
    assert not (run_dir / "STOP").exists()  # consumed
    assert "after" not in summary["eval"]

    # A STOP left over before a run starts is not a request to that run: it is removed.
    (run_dir / "STOP").touch()
    result = CliRunner().invoke(app, ["train", write_config(tmp_path, "async", stopped_at + 1), "--resume"])
    assert result.exit_code == 0, result.output
    summary = json.loads((run_dir / "summary.json").read_text())
    assert "stopped" not in summary and summary["steps"] == stopped_at + 1
    assert "after" in summary["eval"]


def test_partial_rollouts_on_the_real_engine_train_every_group_once_within_the_bound(tmp_path):
    """stale_policy "partial" through the real pipeline, engine and harness, at max_staleness 0: a
    rollout a version old pauses between turns until the engine holds the newest weights, every
    group trains once (none generated again), and no trained token is older than the bound."""
    changes = {"stale_policy": "partial", "partial_age": 1, "max_staleness": 0, "steps": 3}
    config, run_dir = tiny_run(tmp_path, changes, name="run-partial")
    result = CliRunner().invoke(app, ["train", config])
    assert result.exit_code == 0, result.output
    steps = [r for r in records(run_dir) if "version" in r and "eval" not in r]
    assert len(steps) == 3 and all(r["stale_policy"] == "partial" for r in steps)
    assert all(r["groups"]["dropped_stale_total"] == 0 for r in steps)
    assert all(r["policy_version_lag"]["max"] == 0 for r in steps if r["updated"])
    assert "partial_pauses_total" in steps[-1]
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    train = [t for t in trajs if t["metadata"]["purpose"] == "train"]
    groups = [(t["task_id"], t["metadata"]["group"]) for t in train]
    assert len(train) == 3 * 2 * 2, "3 steps x 2 groups x G = 2: no group generated twice"
    assert len(set(groups)) == 6
