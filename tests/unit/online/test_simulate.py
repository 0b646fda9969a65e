"""`inhabit online simulate`: the user model, and one small simulation end to end.

The end-to-end test runs the real processes (`inhabit online init`, `inhabit serve --follow
--sessions`, `inhabit online run`) on loopback with a tiny random-init model and a small quickstart
family (its own TOML), real sandboxes and real grading: 1 cycle of 4 sessions per version.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from inhabit.online.sim_users import SimUser, answer, population
from inhabit.orchestrator.online_sim import wilson

SRC = Path(__file__).resolve().parents[3] / "src"


def test_population_has_the_silent_share() -> None:
    users = population(10, 0.2, random.Random(0))
    assert sum(u.silent for u in users) == 2 and [u.id for u in users] == list(range(10))
    assert not any(u.silent for u in population(5, 0.0, random.Random(0)))


def test_answers_follow_the_hidden_tests_with_the_noise_share() -> None:
    rng = random.Random(7)
    user = SimUser(0, silent=False)
    draws = [(passed, *answer(user, passed, 0.1, rng)) for passed in [True, False] * 2000]
    assert all(verdict == (passed != flipped) for passed, verdict, flipped in draws)
    share = sum(flipped for _, _, flipped in draws) / len(draws)
    assert 0.08 < share < 0.12
    assert all(answer(user, p, 0.0, rng) == (p, False) for p in (True, False))
    assert answer(SimUser(1, silent=True), True, 0.1, rng) == (None, False)


def test_wilson_interval() -> None:
    assert wilson(0, 0) is None
    lo, hi = wilson(5, 10)
    assert lo < 0.5 < hi and lo > 0.2 and hi < 0.8
    assert wilson(0, 10)[0] < 1e-9 and wilson(10, 10)[1] > 1 - 1e-9


def inhabit(*args: str, cwd: Path | None = None, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(SRC), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "inhabit", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=timeout,
    )


def test_bad_input_is_one_error_line(tmp_path: Path) -> None:
    out = inhabit("online", "simulate", "--users", "2", "--silent", "0.9", "--out", str(tmp_path / "o"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    (line,) = [x for x in out.stderr.splitlines() if x.strip()]
    assert line.startswith("error:") and "silent" in line
    missing = inhabit("online", "simulate", "--model", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert missing.returncode == 2 and "error: --model" in missing.stderr
    assert not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def small_world(tmp_path_factory) -> tuple[Path, Path]:
    """A quickstart TOML with a small family and short episodes, and a tiny model on its tokenizer."""
    from inhabit.models.tiny import TinyModelSpec, build_tiny_model, save_model_folder
    from inhabit.orchestrator.quickstart.bootstrap import quickstart_tokenizer

    root = tmp_path_factory.mktemp("sim")
    qs = Path(__file__).resolve().parents[3] / "configs" / "quickstart.toml"
    text = qs.read_text()
    text = text.replace("count = 1064", "count = 24").replace("held_out = 32", "held_out = 4")
    text = text.replace("max_turns = 4", "max_turns = 2").replace(
        "max_turn_tokens = 96", "max_turn_tokens = 16"
    )
    toml = root / "quickstart.toml"
    toml.write_text(text)
    tok = quickstart_tokenizer()
    spec = TinyModelSpec(
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=64,
        max_position_embeddings=1024,
    )
    model = save_model_folder(
        build_tiny_model(spec, vocab_size=(len(tok) + 63) // 64 * 64, seed=0), tok, root / "m"
    )
    return toml, model


@pytest.mark.slow  # about a minute: three processes start (init, serve, the loop) on 2 busy cores
def test_one_cycle_runs_end_to_end(small_world, tmp_path: Path) -> None:
    toml, model = small_world
    out = tmp_path / "sim"
    run = inhabit(
        "online", "simulate", "--versions", "1", "--sessions", "4", "--users", "2", "--silent", "0.5",
        "--noise", "0.5", "--seed", "4", "--concurrency", "4", "--model", str(model), "--out", str(out),
        f"quickstart={toml}", "gate_samples=1", "timeout_s=200",
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    assert "seed 4: versions" in run.stdout and "first vs last served version" in run.stdout
    result = json.loads((out / "simulate.json").read_text())
    assert result["users_tasks"] == 2 and result["gate_tasks"] == 2
    (seed,) = result["seeds"]
    assert seed["sessions"] == 8 and seed["answered"] == 4  # one user of two never answers
    v0, v1 = seed["versions"]
    assert (v0["version"], v0["status"], v0["sessions"]) == (0, "published", 4)
    # Seed 4: the two answers of the first round differ (one flipped), so the update has a
    # gradient and the candidate reaches the gate, which measures version 0 once on the way.
    assert v0["gate_success"] is not None and v1["trained_on"] == 2
    assert (v1["version"], v1["parent"]) == (1, 0) and v1["status"] in ("published", "refused")
    assert v1["gate_passed"] == (v1["status"] == "published")
    for key in ("acceptance", "acceptance_ci", "true_success", "trained_on", "gate_passed", "answered"):
        assert key in v0
    assert seed["shipped_but_should_be_refused"] == []
    # Every rated session of the first round went to the one cycle, once; the last round's wait.
    assert seed["rated_consumed"] == 2 and seed["rated_in_pool"] == 2
    sessions = [json.loads(x) for x in (out / "seed-4" / "sessions.jsonl").read_text().splitlines()]
    assert len({s["session_id"] for s in sessions}) == 8
    for s in sessions:
        if s["verdict"] is None:
            assert s["decision"] == "unanswered"
        else:
            assert s["verdict"] == (s["passed"] != s["flipped"])
            assert s["decision"] in (("accepted", "rejected") if s["changed"] else ("no_changes",))
