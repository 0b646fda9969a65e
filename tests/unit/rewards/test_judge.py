"""LLM judges against a scripted OpenAI-compatible server on 127.0.0.1: parsing, retries, timeouts,
the content-keyed cache, and composition with missing parts."""

from __future__ import annotations

import time

import pytest

from inhabit.rewards.compose import Changes, RewardComposer, RewardConfig
from inhabit.rewards.judge import Judge, JudgeCache, JudgeConfig, parse_score

DIFF = (
    "--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n def add(a, b):\n-    return a - b\n+    return a + b\n"
)


def test_parse_score_is_strict():
    assert parse_score("looks fine\nSCORE: 7/10") == 0.7
    assert parse_score("SCORE: 2/10\nthinking again...\nSCORE: 9.5/10\n") == 0.95
    assert parse_score("SCORE: 10/10") == 1.0 and parse_score("SCORE: 0/10") == 0.0
    for bad in (
        "",
        "score 7",
        "SCORE: 7",
        "SCORE: 11/10",
        "SCORE: 7/10 because",
        "The SCORE: 7/10",
        "SCORE: -1/10",
    ):
        assert parse_score(bad) is None, bad


async def test_judge_scores_retries_unparseable_and_caches(tmp_path, chat_server):
    answers = ["I think it is good.", "Correct fix.\nSCORE: 8/10", "SCORE: 3/10"]
    state, url = chat_server(lambda body: answers.pop(0))
    cache = JudgeCache(tmp_path / "cache")
    judge = Judge(JudgeConfig(name="correctness", base_url=url, retries=2, backoff_s=0), cache)
    res = await judge.score(instruction="fix add", diff=DIFF, message="changed - to +")
    assert res.score == 0.8 and res.error is None and res.attempts == 2 and not res.cached
    prompt = state["seen"][-1]["messages"][0]["content"]
    assert "Correctness:" in prompt and "return a + b" in prompt and "SCORE: N/10" in prompt
    n = len(state["seen"])
    again = await judge.score(instruction="fix add", diff=DIFF, message="changed - to +")
    assert again.score == 0.8 and again.cached and len(state["seen"]) == n  # no new completion call
    # Another process with the same cache folder hits too; other content misses.
    judge2 = Judge(JudgeConfig(name="correctness", base_url=url, retries=0), JudgeCache(tmp_path / "cache"))
    assert (await judge2.score(instruction="fix add", diff=DIFF, message="changed - to +")).cached
    other = await judge2.score(instruction="fix add", diff=DIFF + " ", message="")  # a miss: asks the server
    assert other.score == 0.3 and not other.cached and answers == []
    await judge.close()
    await judge2.close()


async def test_judge_that_never_parses_gives_no_score(chat_server):
    state, url = chat_server(lambda body: "SCORE: 12/10")
    judge = Judge(JudgeConfig(name="style", base_url=url, retries=2, backoff_s=0))
    res = await judge.score(instruction="x", diff=DIFF)
    assert res.score is None and res.attempts == 3 and "unparseable" in (res.error or "")
    assert len([b for b in state["seen"]]) == 3
    await judge.close()


async def test_judge_timeouts_and_dead_endpoints_give_no_score(chat_server):
    def slow(body):
        time.sleep(3)
        return "SCORE: 5/10"

    _, url = chat_server(slow)
    judge = Judge(
        JudgeConfig(name="minimality", base_url=url, model="m", timeout_s=0.5, retries=1, backoff_s=0)
    )
    res = await judge.score(instruction="x", diff=DIFF)
    assert res.score is None and res.attempts == 2 and "Timeout" in (res.error or "")
    await judge.close()
    dead = Judge(JudgeConfig(name="style", base_url="http://127.0.0.1:9/v1", timeout_s=2, retries=0))
    res = await dead.score(instruction="x", diff=DIFF)
    assert res.score is None and res.error
    await dead.close()


async def test_composition_renormalizes_or_zeroes_missing_judges(chat_server):
    _, good = chat_server(lambda body: "SCORE: 6/10")
    _, bad = chat_server(lambda body: "no idea")
    judges = [
        JudgeConfig(name="style", base_url=good, weight=1.0),
        JudgeConfig(name="minimality", base_url=bad, weight=1.0, retries=0),
    ]
    changes = Changes(before={"calc.py": "def add(a, b):\n    return a - b\n"},
                      after={"calc.py": "def add(a, b):\n    return a + b\n"})  # fmt: skip
    composer = RewardComposer(RewardConfig(tests_weight=2.0, judges=judges))
    out = await composer.compose(tests=1.0, changes=changes, instruction="fix add")
    assert out.parts == {"tests": 1.0, "judge_style": 0.6, "judge_minimality": None}
    assert out.missing == ["judge_minimality"]
    assert out.reward == pytest.approx((2 * 1.0 + 0.6) / 3)
    assert "unparseable" in out.details["judge_minimality"]["error"]
    await composer.close()
    zero = RewardComposer(RewardConfig(tests_weight=2.0, judges=judges, missing="zero"))
    out = await zero.compose(tests=1.0, changes=changes)
    assert out.reward == pytest.approx((2 * 1.0 + 0.6) / 4)
    await zero.close()
