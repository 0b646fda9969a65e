"""The pure parts of `inhabit specialize`: the split by module, the intervals and the refusal to
call a result better, the resumable state, the budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inhabit.errors import ConfigError, OrchestratorError
from inhabit.orchestrator.specialize.config import (
    SpecializeConfig,
    folder_parameters,
    parse_budget,
    plan,
    rl_trainer,
)
from inhabit.orchestrator.specialize.split import module_of, split_by_module
from inhabit.orchestrator.specialize.state import RunState
from inhabit.orchestrator.specialize.stats import difference_interval, verdict, wilson


def built(tmp_path: Path, modules: dict[str, int]) -> list[Path]:
    """Task folders as `inhabit tasks build` writes them: `mutation.json` names the mutated file."""
    dirs = []
    for module, n in modules.items():
        for i in range(n):
            d = tmp_path / f"{module.replace('/', '_')}-{i}"
            d.mkdir()
            (d / "mutation.json").write_text(json.dumps({"path": module, "operator": "x"}))
            dirs.append(d)
    return dirs


def test_split_keeps_every_module_on_one_side(tmp_path: Path) -> None:
    dirs = built(tmp_path, {"pkg/a.py": 5, "pkg/b.py": 3, "pkg/c.py": 4, "pkg/d.py": 2, "pkg/e.py": 6})
    s = split_by_module(dirs, held_out_share=0.3, seed=0)
    assert set(s.train) | set(s.held_out) == {d.name for d in dirs} and not set(s.train) & set(s.held_out)
    side = {d.name: ("held-out" if d.name in s.held_out else "train") for d in dirs}
    for d in dirs:
        assert side[d.name] == s.modules[module_of(d)]
    assert 0.3 * len(dirs) <= len(s.held_out) < len(dirs)
    assert split_by_module(list(reversed(dirs)), 0.3, seed=0) == s  # independent of the build's order
    assert any(split_by_module(dirs, 0.3, seed=k).held_out != s.held_out for k in range(1, 6))


def test_split_keeps_a_train_module_and_needs_two(tmp_path: Path) -> None:
    two = built(tmp_path, {"a.py": 1, "b.py": 9})
    s = split_by_module(two, held_out_share=0.9)
    assert s.train and s.held_out
    one = [d for d in two if module_of(d) == "a.py"]
    with pytest.raises(OrchestratorError, match="needs two or more"):
        split_by_module(one)


def test_a_task_without_mutation_json_is_its_own_module(tmp_path: Path) -> None:
    (tmp_path / "t1").mkdir()
    assert module_of(tmp_path / "t1") == "<task t1>"


def test_wilson_interval() -> None:
    lo, hi = wilson(0, 10)
    assert lo == 0.0 and 0.1 < hi < 0.3
    lo, hi = wilson(5, 10)
    assert lo < 0.5 < hi and abs((0.5 - lo) - (hi - 0.5)) < 1e-9
    assert wilson(50, 100)[1] - wilson(50, 100)[0] < hi - lo  # more samples, narrower


def test_the_verdict_refuses_better_when_the_interval_holds_zero() -> None:
    tasks = [f"t{i}" for i in range(20)]
    before = dict.fromkeys(tasks, 0.0)
    # 4 of 20 tasks improved: a real but noisy gain, the interval is above 0
    gain = difference_interval(before, {t: (1.0 if i < 4 else 0.0) for i, t in enumerate(tasks)})
    assert gain["low"] > 0 and verdict(gain) == "better"
    # one task up, one down: no change the data can see
    mixed = difference_interval(before | {"t1": 1.0}, before | {"t0": 1.0})
    assert mixed["low"] < 0 < mixed["high"] and verdict(mixed) == "no measurable change"
    worse = difference_interval(
        dict.fromkeys(tasks, 1.0), {t: (0.0 if i < 6 else 1.0) for i, t in enumerate(tasks)}
    )
    assert verdict(worse) == "worse"
    few = difference_interval({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0})
    assert few["low"] > 0 and verdict(few) == "too few held-out tasks"
    assert verdict(difference_interval({}, {})) == "not measured"


def test_state_resumes_and_a_second_run_reuses_tasks_and_baseline(tmp_path: Path) -> None:
    keys = {"repo": "r1", "tasks": "t", "model": "m", "eval": "e", "bootstrap": "b", "config": "c"}
    st = RunState(tmp_path / "state.json")
    st.adopt(keys, resume=False)
    for name in ("tasks", "baseline", "bootstrap", "rl"):
        st.start(name)
        st.finish(name, {"note": name})
    st.start("final")  # cut short (Ctrl-C)
    st.charge("final")

    resumed = RunState(tmp_path / "state.json")
    assert resumed.adopt(keys, resume=True) == ["tasks", "baseline", "bootstrap", "rl"]
    assert resumed.step("final")["status"] == "started"  # runs again, resuming its own records

    second = RunState(tmp_path / "state.json")
    assert second.adopt(keys | {"config": "c2"}, resume=False) == ["tasks", "baseline", "bootstrap"]
    assert not second.step("rl") and second.elapsed() == 0.0  # reused time is not this run's

    other_model = RunState(tmp_path / "state.json")
    assert other_model.adopt(keys | {"model": "m2"}, resume=True) == ["tasks"]
    other_repo = RunState(tmp_path / "state.json")
    assert other_repo.adopt(keys | {"repo": "r2"}, resume=True) == []


def test_a_killed_invocation_is_charged_up_to_its_last_heartbeat(tmp_path: Path) -> None:
    import os
    import time

    keys = {"repo": "r", "tasks": "t", "model": "m", "eval": "e", "bootstrap": "b", "config": "c"}
    st = RunState(tmp_path / "state.json")
    st.adopt(keys, resume=False)
    st.start("tasks")
    st.finish("tasks", {"note": "t"})
    st.start("baseline")
    with st.heartbeat(every_s=0.05):
        time.sleep(0.2)
    # killed: nothing charged; its last heartbeat was 300 s after the step started
    started = st.step("baseline")["started_at"] - 400.0
    st.data["steps"]["baseline"]["started_at"] = started
    st.save()
    os.utime(st.alive_path, (started + 300.0, started + 300.0))
    spent_before = st.elapsed()

    resumed = RunState(tmp_path / "state.json")
    resumed.adopt(keys, resume=True)
    resumed.start("baseline")
    assert abs(resumed.elapsed() - spent_before - 300.0) < 1.0
    assert resumed.step("baseline")["started_at"] > started + 399  # this invocation's own start
    resumed.charge("baseline")  # a step that is cut and charged leaves nothing for the next start
    again = RunState(tmp_path / "state.json")
    again.adopt(keys, resume=True)
    charged = again.elapsed()
    again.start("baseline")
    assert again.elapsed() == charged


def test_budget_parsing_and_split() -> None:
    assert parse_budget("2h") == 7200 and parse_budget("1h30m") == 5400 and parse_budget("90m") == 5400
    assert parse_budget("600") == 600 and parse_budget("45m") == 2700
    for bad in ("soon", "2x", "30s", "1h 2"):
        with pytest.raises(ConfigError, match="--budget"):
            parse_budget(bad)
    p = plan(3600)
    assert p.share_s("tasks") + p.share_s("baseline") + p.share_s("bootstrap") < 3600
    assert "RL: the rest" in p.lines()[0]


def test_an_evaluation_cut_by_its_deadline_keeps_its_complete_part() -> None:
    from inhabit.orchestrator.specialize.evals import complete_part

    def recs(*pairs: tuple[str, int]) -> list[dict]:
        return [{"task_id": t, "sample": k, "success": False} for t, k in pairs]

    ids = ["a", "b", "c"]
    # two whole rounds and part of a third: every task, two samples
    assert complete_part(recs(("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1), ("a", 2)), ids) == (
        ids,
        2,
    )
    # round 0 unfinished: the tasks whose first sample finished, once each
    assert complete_part(recs(("a", 0), ("c", 0)), ids) == (["a", "c"], 1)
    assert complete_part(recs(("b", 1)), ids) == ([], 1)
    assert complete_part([], []) == ([], 1)


def test_a_real_model_trains_lora_adapters_by_default_and_a_tiny_one_everything(tmp_path: Path) -> None:
    import torch
    from safetensors.torch import save_file

    save_file({"a.weight": torch.zeros(3, 4), "b": torch.zeros(5)}, str(tmp_path / "model.safetensors"))
    save_file({"c": torch.zeros(2, 2, 2)}, str(tmp_path / "model-2.safetensors"))
    assert folder_parameters(tmp_path) == 12 + 5 + 8

    cfg = SpecializeConfig()
    tiny, words = rl_trainer(cfg, 1_100_000)
    assert tiny.lora is None and tiny.lr == cfg.trainer.lr and words.startswith("full fine-tuning of 1.1M")
    real, words = rl_trainer(cfg, 134_515_008)
    assert (
        real.lora is not None and (real.lora.rank, real.lora.alpha) == (16, 32.0) and real.lr == cfg.lora_lr
    )
    assert words.startswith("LoRA rank 16 (alpha 32) on a 134.5M-parameter model, lr 0.0001")
    assert real.model_dump(exclude={"lora", "lr"}) == cfg.trainer.model_dump(exclude={"lora", "lr"})

    forced_full, _ = rl_trainer(SpecializeConfig(training="full"), 134_515_008)
    assert forced_full.lora is None
    forced_lora, _ = rl_trainer(SpecializeConfig(training="lora"), 1_000)
    assert forced_lora.lora is not None
    # trainer.lora set by the user: LoRA with those settings and trainer.lr, whatever the size
    own = SpecializeConfig.model_validate({"trainer": {"lr": 3e-4, "lora": {"rank": 4}}})
    mine, words = rl_trainer(own, 1_000)
    assert mine.lora is not None and mine.lora.rank == 4 and mine.lr == 3e-4 and "rank 4" in words
