"""`inhabit eval`: the training harness over tasks, pass@k, the table and JSON, resume."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.evaluation.metrics import pass_at_k, summarize
from inhabit.evaluation.runner import EvalError, discover_tasks, done_records, read_records, run_eval
from inhabit.harness.config import HarnessConfig
from inhabit.inference.openai_policy import OpenAIPolicy
from inhabit.tasks.build import write_calc_task

FAST_COMMAND = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {Path(sys.prefix).resolve()}/bin/python -m pytest -q -p no:cacheprovider"
FIX = (
    '<tool name="edit_file"><path>calc.py</path><old>def add(a, b):\n    return a - b</old>'
    "<new>def add(a, b):\n    return a + b</new></tool>"
)
FINISH = '<tool name="finish"><message>fixed</message></tool>'


def fixer(body: dict) -> str:
    """Fixes the calculator on the first turn, finishes on the next."""
    return FINISH if any(m["role"] == "assistant" for m in body["messages"]) else FIX


def test_pass_at_k_matches_the_combinatorial_definition():
    for n in range(1, 9):
        for c in range(n + 1):
            for k in range(1, n + 1):
                want = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(want)
    with pytest.raises(ValueError):
        pass_at_k(3, 1, 4)


def test_summary_counts_causes_flags_and_pass_at_k():
    def rec(task, s, ok, status="finished", flags=()):
        return {"task_id": task, "sample": s, "success": ok, "reward": float(ok), "status": status,
                "turns": 2, "completion_tokens": 10, "flags": list(flags)}  # fmt: skip

    recs = [rec("a", 0, True), rec("a", 1, False), rec("b", 0, False, flags=["tests_missing"]),
            rec("b", 1, False, status="policy_error")]  # fmt: skip
    s = summarize(recs, k=2)
    assert s["success_rate"] == 0.25
    assert s["pass@1"] == pytest.approx((0.5 + 0.0) / 2)
    assert s["pass@2"] == pytest.approx((1.0 + 0.0) / 2)
    assert s["causes"] == {"success": 1, "tests_failed": 2, "policy_error": 1}
    assert s["flags"] == {"tests_missing": 1} and s["samples_flagged"] == 1


async def test_eval_runs_the_harness_grades_and_resumes(tmp_path, sandbox_provider, chat_server):
    for i in range(2):
        write_calc_task(tmp_path / "tasks" / f"calc-{i}", command=FAST_COMMAND)
        toml = tmp_path / "tasks" / f"calc-{i}" / "task.toml"
        toml.write_text(toml.read_text().replace('id = "calc-001"', f'id = "calc-{i}"'))
    tasks = discover_tasks(tmp_path / "tasks")
    assert [t.id for t in tasks] == ["calc-0", "calc-1"]
    state, url = chat_server(fixer)
    records_path = tmp_path / "eval.records.jsonl"
    policy = OpenAIPolicy(url)
    harness = HarnessConfig(max_turns=4)
    # An "interrupted" run: only calc-0 done.
    recs = await run_eval(tasks[:1], policy, sandbox_provider, records_path, samples=2, harness=harness)
    assert len(recs) == 2 and all(r["success"] and r["status"] == "finished" for r in recs)
    assert recs[0]["turns"] == 2 and recs[0]["completion_tokens"] == 20
    with pytest.raises(EvalError, match="--resume"):
        await run_eval(tasks, policy, sandbox_provider, records_path, samples=2, harness=harness)
    calls_before = len(state["seen"])
    recs = await run_eval(tasks, policy, sandbox_provider, records_path, samples=2, resume=True,
                          harness=harness)  # fmt: skip
    await policy.close()
    assert len(state["seen"]) - calls_before == 4  # only calc-1's two samples ran (2 turns each)
    assert sorted((r["task_id"], r["sample"]) for r in read_records(records_path)) == [
        ("calc-0", 0), ("calc-0", 1), ("calc-1", 0), ("calc-1", 1)]  # fmt: skip
    assert summarize(recs, k=2)["pass@2"] == 1.0


async def test_no_episode_starts_after_the_deadline(tmp_path, sandbox_provider, chat_server):
    import time

    write_calc_task(tmp_path / "tasks" / "calc-0", command=FAST_COMMAND)
    tasks = discover_tasks(tmp_path / "tasks")
    state, url = chat_server(fixer)
    policy = OpenAIPolicy(url)
    harness = HarnessConfig(max_turns=4)
    path = tmp_path / "eval.records.jsonl"
    recs = await run_eval(tasks, policy, sandbox_provider, path, samples=2, harness=harness,
                          deadline=time.monotonic())  # fmt: skip
    assert recs == [] and state["seen"] == [] and not path.exists()
    recs = await run_eval(tasks, policy, sandbox_provider, path, samples=2, harness=harness, resume=True,
                          deadline=time.monotonic() + 600)  # fmt: skip
    await policy.close()
    assert sorted(r["sample"] for r in recs) == [0, 1] and all(r["success"] for r in recs)


def test_cli_prints_table_writes_json_and_counts_failures(tmp_path, chat_server):
    write_calc_task(tmp_path / "tasks" / "calc", command=FAST_COMMAND)
    _, url = chat_server(lambda body: "I am not sure what to do.")  # never calls a tool
    out = tmp_path / "res" / "eval.json"
    result = CliRunner().invoke(app, ["eval", "--tasks", str(tmp_path / "tasks"), "--model", url, "--samples", "2",
                                      "--out", str(out), "--max-turns", "2", "--backend", "process"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "pass@2" in result.stdout and "success rate" in result.stdout
    summary = json.loads(out.read_text())
    assert summary["samples"] == 2 and summary["success_rate"] == 0.0 and summary["pass@2"] == 0.0
    assert summary["causes"] == {"turn_limit": 2}
    assert len(read_records(out.with_suffix(".records.jsonl"))) == 2


def test_table_lists_pass_at_1_once_when_k_is_1(capsys):
    from inhabit.evaluation.cli import print_summary

    recs = [{"task_id": "a", "sample": 0, "success": True, "reward": 1.0, "status": "finished", "turns": 2,
             "completion_tokens": 5, "prompt_tokens": 9, "flags": []}]  # fmt: skip
    print_summary(summarize(recs, k=1), "t")
    assert capsys.readouterr().out.count("pass@1") == 1


async def test_a_sample_the_machinery_failed_runs_again_on_resume(tmp_path, sandbox_provider, chat_server):
    tasks = discover_tasks(write_calc_task(tmp_path / "calc", command=FAST_COMMAND))
    down = {"now": True}

    def reply(body: dict) -> str:
        if down["now"]:
            raise RuntimeError("the engine fell over")  # the server answers 500
        return fixer(body)

    _, url = chat_server(reply)
    policy = OpenAIPolicy(url, max_retries=0)
    path, harness = tmp_path / "r.jsonl", HarnessConfig(max_turns=4)
    (rec,) = await run_eval(tasks, policy, sandbox_provider, path, harness=harness)
    assert rec["status"] == "policy_error" and not rec["success"]
    assert done_records(read_records(path)) == []  # recorded, but not done
    down["now"] = False
    (rec,) = await run_eval(tasks, policy, sandbox_provider, path, resume=True, harness=harness)
    await policy.close()
    assert rec["status"] == "finished" and rec["success"]
    assert [r["status"] for r in read_records(path)] == ["policy_error", "finished"]
    assert done_records(read_records(path)) == [rec]


def test_shipped_reward_config_parses():
    from inhabit.config import load_config
    from inhabit.rewards.compose import RewardConfig

    cfg = load_config(RewardConfig, Path(__file__).resolve().parents[3] / "configs" / "reward.toml")
    assert [j.name for j in cfg.judges] == ["minimality", "style"] and cfg.gate_on_tests


async def test_eval_composes_shaped_parts_and_judges(tmp_path, sandbox_provider, chat_server):
    from inhabit.rewards.compose import RewardComposer, RewardConfig
    from inhabit.rewards.judge import JudgeConfig

    task_root = write_calc_task(tmp_path / "calc", command=FAST_COMMAND)
    _, agent_url = chat_server(fixer)
    judge_state, judge_url = chat_server(lambda body: "Minimal.\nSCORE: 9/10")
    composer = RewardComposer(
        RewardConfig(
            lint_weight=1.0,
            diff_weight=1.0,
            judges=[JudgeConfig(name="minimality", base_url=judge_url, weight=1.0)],
        )
    )
    policy = OpenAIPolicy(agent_url)
    recs = await run_eval(discover_tasks(task_root), policy, sandbox_provider, tmp_path / "r.jsonl",
                          harness=HarnessConfig(max_turns=4), composer=composer)  # fmt: skip
    await policy.close()
    await composer.close()
    (rec,) = recs
    assert rec["success"] and rec["reward_parts"] == {
        "tests": 1.0,
        "lint": 1.0,
        "diff": 1.0,
        "judge_minimality": 0.9,
    }
    assert rec["composed_reward"] == pytest.approx(3.9 / 4) and rec["missing_parts"] == []
    assert "+    return a + b" in judge_state["seen"][0]["messages"][0]["content"]  # the judge saw the diff
    summary = summarize(recs)
    assert summary["reward_parts"]["judge_minimality"] == {"mean": 0.9, "missing": 0}


@pytest.mark.slow
def test_cli_eval_with_a_local_tiny_model_folder(tmp_path):
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    folder = save_model_folder(build_tiny_model("dense-1m", vocab_size=len(tok), seed=0), tok, tmp_path / "m")
    write_calc_task(tmp_path / "tasks" / "calc", command=FAST_COMMAND)
    out = tmp_path / "eval.json"
    args = ["eval", "--tasks", str(tmp_path / "tasks"), "--model", str(folder), "--out", str(out),
            "--max-turns", "1", "--max-turn-tokens", "16", "--backend", "process", "--seed", "0"]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    summary = json.loads(out.read_text())
    assert summary["samples"] == 1 and summary["success_rate"] == 0.0  # random weights babble
    assert summary["mean_completion_tokens"] > 0 and summary["causes"] in (
        {"turn_limit": 1},
        {"tests_failed": 1},
    )
