"""The gate runs candidates on held-out tasks with `inhabit eval`'s machinery and refuses one that
regresses beyond the tolerance; a refused candidate is never published."""

from __future__ import annotations

from pathlib import Path

import pytest

from inhabit.online.cycle import OnlineLoop
from inhabit.online.gate import decide

from .conftest import online_config, synthetic_trajectory

TASKS = Path(__file__).resolve().parents[3] / "examples" / "tasks"


def test_decide_allows_the_tolerance_and_no_more() -> None:
    assert decide(0.50, 0.50, 0.0) and decide(0.46, 0.50, 0.05)
    assert not decide(0.44, 0.50, 0.05)


@pytest.mark.slow
def test_a_regressing_candidate_is_refused_and_not_published(tiny_folder, tmp_path: Path) -> None:
    gate = {"tasks": str(TASKS), "max_turns": 1, "max_turn_tokens": 16, "tolerance": 0.1}
    loop = OnlineLoop(online_config(tmp_path, gate=gate))
    loop.init(tiny_folder)
    deployed = loop.store.deployed()
    # The deployed version solved every gate task when it was measured; a random tiny model cannot.
    loop.store.update_cycle(deployed.id, gate={"success_rate": 1.0, "passed": True})
    for i in range(2):
        loop.store.add_session(synthetic_trajectory(i), signals=[("accepted" if i else "rejected", 1.0)])
    row = loop.run_cycle()
    assert row.status == "refused" and row.gate["passed"] is False
    assert row.gate["success_rate"] == 0.0 and row.gate["deployed_success_rate"] == 1.0
    assert (tmp_path / "sessions.db.online" / "gate" / f"cycle-{row.id}.jsonl").is_file()
    assert loop.weights.latest() == 0 and loop.store.deployed().version == 0
    assert not loop.checkpoint(row.version).exists()
    assert sorted(row.sessions) == sorted(loop.store.used())  # the sessions were used, once
