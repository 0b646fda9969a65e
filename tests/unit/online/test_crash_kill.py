"""`inhabit online run` killed with SIGKILL at random moments, restarted, killed again: in the end
every rated session was trained on by exactly one finished cycle, and the weight store holds
exactly the versions the log says were published."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from inhabit.online.cycle import OnlineLoop
from inhabit.online.store import SessionStore

from .conftest import online_config, synthetic_trajectory
from .test_cycle import check_exactly_once

SRC = Path(__file__).resolve().parents[3] / "src"


def inhabit(*args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "inhabit", *args],
        env={**os.environ, "PYTHONPATH": str(SRC)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


@pytest.mark.slow
def test_random_kills_never_lose_or_repeat_a_session(tiny_folder, tmp_path: Path) -> None:
    cfg = online_config(tmp_path)
    toml = tmp_path / "online.toml"
    toml.write_text(
        f'store = "{cfg.store}"\nweights = "{cfg.weights}"\n[cycle]\nmin_sessions = 2\npoll_s = 0.05\n'
        "[train]\nupdates = 2\nmax_lag = 50\n[train.trainer]\nlr = 1e-3\nmicro_batch_tokens = 512\n"
    )
    init = inhabit("online", "init", "--config", str(toml), "--model", str(tiny_folder))
    assert init.wait(timeout=300) == 0, init.stderr.read() if init.stderr else ""
    store = SessionStore(cfg.store)
    rng = random.Random(0)
    ids: list[str] = []
    kills = 0
    for round_ in range(8):
        for i in range(4):
            n = round_ * 4 + i
            kind = "accepted" if rng.random() < 0.5 else "rejected"
            ids.append(store.add_session(synthetic_trajectory(n), signals=[(kind, 1.0)]))
        proc = inhabit("online", "run", "--config", str(toml), "--until-idle")
        assert proc.stderr is not None
        while "ready" not in (line := proc.stderr.readline()):  # imports done, recovery done
            assert line, "the loop exited before it was ready"
        time.sleep(rng.uniform(0.0, 3.0))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            kills += 1
        proc.wait(timeout=60)
    final = inhabit("online", "run", "--config", str(toml), "--until-idle")
    _, err = final.communicate(timeout=600)
    assert final.returncode == 0, err
    assert kills >= 3  # the run was really cut short several times
    loop = OnlineLoop(cfg)
    check_exactly_once(loop, ids)
