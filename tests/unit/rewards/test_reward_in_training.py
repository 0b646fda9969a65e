"""The `[reward]` table of a run: rollouts get the composed reward and every part, a fix that adds
lint findings earns less than a clean one, and neither a cheat nor doing nothing earns anything."""

from __future__ import annotations

from pathlib import Path

from inhabit.harness.replay import ReplayPolicy
from inhabit.harness.rollout import run_rollout
from inhabit.orchestrator.config import RunRewardConfig
from inhabit.orchestrator.pipeline import rollout_stats
from inhabit.rewards.compose import RewardComposer
from inhabit.tasks.build import CALC_BUGGY, CALC_FIXED

ROOT = Path(__file__).resolve().parents[3]
# The same fix with three new ruff findings (an unused import, `== None`, an ambiguous name).
CALC_FIXED_DIRTY = "import os\n\n" + CALC_FIXED + "\n\ndef check(l):\n    return l == None\n"


def _episode(files: dict[str, str]) -> ReplayPolicy:
    turn = [("write_file", {"path": path, "content": text}) for path, text in files.items()]
    return ReplayPolicy(
        [turn, [("finish", {"message": "fixed add"})]] if turn else [[("finish", {"message": "done"})]]
    )


async def _rollout(task, provider, files, config=None):
    composer = RewardComposer(config or RunRewardConfig(tests_weight=1.0, lint_weight=1.0, diff_weight=0.5))
    return await run_rollout(task, _episode(files), provider, composer=composer)


async def test_a_fix_that_worsens_lint_earns_less_than_a_clean_one(calc_task, sandbox_provider):
    clean = await _rollout(calc_task, sandbox_provider, {"calc.py": CALC_FIXED})
    dirty = await _rollout(calc_task, sandbox_provider, {"calc.py": CALC_FIXED_DIRTY})
    assert clean.reward == 1.0 and clean.reward_parts == {"tests": 1.0, "lint": 1.0, "diff": 1.0}
    assert dirty.reward_parts["tests"] == 1.0 and dirty.reward_parts["lint"] < 1.0
    assert 0.0 < dirty.reward < clean.reward
    stats = rollout_stats([clean, dirty])
    assert stats["reward_parts"]["tests"] == 1.0 and stats["reward_parts"]["lint"] < 1.0


async def test_doing_nothing_or_a_wrong_fix_earns_nothing_under_the_gate(calc_task, sandbox_provider):
    # Without the gate a run that changes nothing would collect the diff part's full score.
    idle = await _rollout(calc_task, sandbox_provider, {})
    assert idle.reward == 0.0 and idle.reward_parts["diff"] == 1.0
    wrong = await _rollout(calc_task, sandbox_provider, {"calc.py": CALC_BUGGY + "\n# looked at it\n"})
    assert wrong.reward == 0.0 and wrong.reward_parts["tests"] == 0.0


async def test_a_flagged_cheat_earns_nothing_even_without_the_gate(calc_task, sandbox_provider):
    # A root conftest that forces every test to pass: grading flags it (fatal), and the lint and
    # diff parts, which a tidy cheat scores well on, must not pay for it.
    conftest = (
        "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )
    config = RunRewardConfig(tests_weight=1.0, lint_weight=1.0, diff_weight=1.0, gate_on_tests=False)
    traj = await _rollout(calc_task, sandbox_provider, {"conftest.py": conftest}, config)
    assert traj.flags, traj.reward_parts
    assert traj.reward == 0.0


def test_the_reward_table_of_a_run_config(tmp_path):
    from inhabit.config import load_config
    from inhabit.orchestrator.config import RunConfig
    from inhabit.rollouts import reward_composer

    path = tmp_path / "run.toml"
    path.write_text(
        (ROOT / "configs" / "quickstart.toml").read_text()
        + "\n[reward]\nlint_weight = 0.5\n"
        + '[[reward.judges]]\nname = "style"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\nweight = 0.25\n'
    )
    cfg = load_config(RunConfig, path, [])
    assert cfg.reward is not None and cfg.reward.gate_on_tests and cfg.reward.lint_weight == 0.5
    composer = reward_composer(cfg.reward)
    assert [j.config.name for j in composer.judges] == ["style"]
    plain = load_config(RunConfig, path, []).model_copy(update={"reward": None})
    assert reward_composer(plain.reward) is None


async def test_the_runner_closes_the_judges_clients_when_the_run_ends(tmp_path, sandbox_provider):
    from inhabit.config import load_config
    from inhabit.orchestrator.config import RunConfig
    from inhabit.rollouts import EngineRunner, reward_composer

    path = tmp_path / "run.toml"
    path.write_text(
        (ROOT / "configs" / "quickstart.toml").read_text()
        + '\n[reward]\n[[reward.judges]]\nname = "style"\nbase_url = "http://127.0.0.1:1/v1"\nmodel = "m"\n'
    )
    cfg = load_config(RunConfig, path, [])
    composer = reward_composer(cfg.reward)
    client = composer.judges[0]._client
    # The engine and tokenizer are not touched before an episode runs.
    runner = EngineRunner(
        None, None, sandbox_provider, harness=cfg.harness, rollout=cfg.rollout, composer=composer
    )
    assert runner.rollout_fn is not None and not client.is_closed()
    await runner.close()
    assert client.is_closed() and runner.rollout_fn is None
    await runner.close()  # twice is harmless
