"""`inhabit scale`: simulated parts on looptime's virtual clock, driven by the real pipeline, buffer,
dispatch and weight sync; and the O(n)-per-event fixes the simulator found in the real code."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import looptime
import pytest

from inhabit.orchestrator.pipeline import TaskStream
from inhabit.orchestrator.scale.calibrate import calibrate
from inhabit.orchestrator.scale.config import ClusterModel, Dist, EngineModel, ScaleConfig
from inhabit.orchestrator.scale.parts import ClusterLink, SimEngine, SimRequest
from inhabit.orchestrator.scale.simulate import simulate
from inhabit.placement.engines import EngineLost, EnginePool
from inhabit.placement.fleet import Fleet

ROOT = Path(__file__).resolve().parents[3]

# A small scenario: 4 engines, 64 sandboxes, quick episodes.
SMALL = {
    "engines": 4,
    "sandboxes": 64,
    "group_size": 4,
    "tasks": 50,
    "engine": {"step_s": 0.02, "per_seq_s": 0.002},
    "episode": {
        "turns": {"kind": "lognormal", "median": 3, "sigma": 0.3},
        "grade_s": {"kind": "lognormal", "median": 5, "sigma": 0.5},
        "exec_s": {"kind": "lognormal", "median": 0.5, "sigma": 1.0},
    },
    "trainer": {"step_s": 1.0, "per_token_s": 1e-4},
}


def small(**changes) -> ScaleConfig:
    data = {**SMALL, **changes}
    return ScaleConfig.model_validate(data)


def on_virtual_time(coro):
    loop = looptime.new_event_loop(start=0.0, noop_cycles=0)
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()


def test_engine_decodes_by_processor_sharing_with_a_batch_cap():
    async def go():
        loop = asyncio.get_running_loop()
        link = ClusterLink(0, ClusterModel())
        e = SimEngine(
            0, EngineModel(step_s=0.025, per_seq_s=0.002, max_batch=5), link, slow=1.0, delta_bytes=1
        )
        t0 = loop.time()
        out = await asyncio.gather(*(e.generate([SimRequest(0, 100)]) for _ in range(10)))
        # two waves of 5 rows: 100 steps of 25 + 5 * 2 ms each
        assert loop.time() - t0 == pytest.approx(2 * 100 * 0.035, rel=1e-3)
        assert all(c[0].tokens == 100 for c in out)
        assert e.batch_s / e.busy_s == pytest.approx(5.0)
        # a crash fails what is running; the engine refuses work until it restarts
        task = asyncio.create_task(e.generate([SimRequest(0, 1000)]))
        await asyncio.sleep(1.0)
        e.crash()
        with pytest.raises(EngineLost):
            await task
        with pytest.raises(EngineLost):
            await e.generate([SimRequest(0, 1)])

    on_virtual_time(go())


def test_a_cut_request_frees_its_row_at_once():
    async def go():
        loop = asyncio.get_running_loop()
        e = SimEngine(
            0,
            EngineModel(step_s=0.01, per_seq_s=0.0),
            ClusterLink(0, ClusterModel()),
            slow=1.0,
            delta_bytes=1,
        )
        long = asyncio.create_task(e.generate([SimRequest(0, 10_000)]))
        t0 = loop.time()
        short = asyncio.create_task(e.generate([SimRequest(0, 100)]))
        await asyncio.sleep(0.5)
        long.cancel()
        await short
        assert loop.time() - t0 == pytest.approx(1.0, rel=1e-3)  # 100 steps of 10 ms
        assert e._n == 0

    on_virtual_time(go())


def test_small_scenario_runs_on_virtual_time_and_keeps_the_staleness_bound():
    for staleness in (0, 2):
        r = simulate(small(max_staleness=staleness))
        assert r["rollouts"] > 0
        assert r["simulated_s"] > 0  # virtual time (a wall-time ratio here failed on a loaded machine)
        assert 0 < r["engine_utilization"] <= 1 and 0 <= r["trainer_idle"] <= 1
        assert max(int(k) for k in r["staleness"]) <= staleness
        assert 0 <= r["wasted_share"] <= 1
        assert r["sync_bytes_per_cluster_per_version"] == [1_300_000]  # one relayed delta per version


def test_same_seed_same_result():
    a, b = simulate(small(seed=3)), simulate(small(seed=3))
    assert {k: v for k, v in a.items() if k not in ("cpu_s", "cpu_ms_per_rollout", "wall_s")} == {
        k: v for k, v in b.items() if k not in ("cpu_s", "cpu_ms_per_rollout", "wall_s")
    }


def test_faults_are_retried_by_the_real_dispatch():
    r = simulate(
        small(
            faults={
                "engine_crashes_per_engine_hour": 200,
                "env_server_losses_per_server_hour": 200,
                "env_server_restart_s": 5,
                "slow_fraction": 0.5,
            },
            sandboxes_per_env_server=16,
            engine={"step_s": 0.02, "per_seq_s": 0.002, "restart_s": 5},
        )
    )
    assert r["engine_crashes"] > 0 and r["env_server_losses"] > 0
    assert r["retried"] > 0
    assert r["rollouts"] > 0


def test_deadline_and_oversampling_cut_the_stragglers():
    heavy = {**SMALL["episode"], "grade_s": {"kind": "pareto", "scale": 2, "alpha": 1.1, "cap": 5000}}
    r = simulate(small(episode=heavy, deadline_s=30))
    assert r["lost_to_deadline"] > 0 and r["cut_surplus"] == 0
    r = simulate(small(episode=heavy, oversample=2))
    assert r["cut_surplus"] > 0 and r["lost_to_deadline"] == 0


def test_clusters_without_a_relay_carry_a_delta_per_engine():
    clusters = [ClusterModel(share=0.5, link_gbps=1), ClusterModel(share=0.5, link_gbps=1, relay=False)]
    r = simulate(small(network={"delta_bytes": 1e6, "clusters": [c.model_dump() for c in clusters]}))
    relayed, direct = r["sync_bytes_per_cluster_per_version"]
    assert relayed == 1_000_000
    assert direct == 2_000_000  # two engines in that cluster, each over the link


def test_dist_kinds():
    rng = random.Random(0)
    assert Dist(kind="fixed", median=3).draw(rng) == 3
    assert Dist(kind="empirical", values=[1, 2]).draw(rng) in (1, 2)
    xs = [Dist(kind="pareto", scale=2, alpha=1.5, cap=50).draw(rng) for _ in range(2000)]
    assert min(xs) >= 2 and max(xs) <= 50
    with pytest.raises(ValueError, match="values"):
        Dist(kind="empirical").draw(rng)


def test_calibrate_from_the_recorded_run_predicts_it():
    cfg, measured = calibrate(ROOT / "examples" / "recorded-run")
    assert cfg.group_size == 4 and cfg.tasks_per_step == 2 and cfg.sandboxes == 32
    assert cfg.episode.grade_s.kind == "empirical"
    r = simulate(cfg)
    # the recorded run's own figures, loosely: a gross modelling error would be far off
    assert r["rollouts_per_min"] == pytest.approx(measured["rollouts_per_min"], rel=0.5)
    assert r["trainer_idle"] == pytest.approx(measured["trainer_idle"], abs=0.1)


def test_calibrate_takes_the_runs_engine_replicas(tmp_path):
    # A run with two embedded engines is simulated with two; a remote backend's servers are not
    # the run's to count, so it stays at one.
    import shutil

    run = tmp_path / "run"
    shutil.copytree(ROOT / "examples" / "recorded-run", run)
    cfg_json = json.loads((run / "config.json").read_text())
    assert calibrate(run)[0].engines == 1
    cfg_json["engine"].update(backend="embedded", replicas=2)
    (run / "config.json").write_text(json.dumps(cfg_json))
    assert calibrate(run)[0].engines == 2
    cfg_json["engine"].update(backend="remote", replicas=1, urls=["http://127.0.0.1:9/v1"])
    (run / "config.json").write_text(json.dumps(cfg_json))
    assert calibrate(run)[0].engines == 1


def test_cli_simulate_prints_the_figures(tmp_path):
    import subprocess
    import sys

    cfg = tmp_path / "s.toml"
    cfg.write_text("engines = 2\nsandboxes = 16\ngroup_size = 2\ntasks = 20\n")
    out = tmp_path / "r.json"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "inhabit",
            "scale",
            "simulate",
            str(cfg),
            "max_staleness=1",
            "--json",
            str(out),
        ],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "COLUMNS": "200"},
    )
    assert p.returncode == 0, p.stderr
    assert "engine utilization" in p.stdout and "control-plane CPU per rollout" in p.stdout
    assert '"max_staleness": 1' in out.read_text()


# ---------------------------------------------------------------------------- the fixes in real code
def test_task_stream_shuffles_once_per_epoch_in_the_same_order_as_before(monkeypatch):
    tasks = list(range(50))
    stream = TaskStream(tasks, seed=7)  # type: ignore[arg-type]
    shuffles = 0
    real = random.Random.shuffle

    def counting(self, x):
        nonlocal shuffles
        shuffles += 1
        return real(self, x)

    monkeypatch.setattr(random.Random, "shuffle", counting)
    got = [stream.next() for _ in range(120)]
    assert shuffles == 3  # epochs 0, 1, 2 (it was one shuffle of every task per task drawn)

    def old(cursor: int) -> int:  # the order a checkpointed cursor resumes into must not change
        epoch, i = divmod(cursor, 50)
        order = list(range(50))
        real(random.Random(7 * 7_919 + epoch), order)
        return order[i]

    assert got == [old(c) for c in range(120)]
    assert TaskStream(tasks, seed=7, cursor=75).next() == old(75)  # type: ignore[arg-type]


class _Counted:
    """An engine payload that counts how often the pool reads its version."""

    reads = 0

    def __init__(self) -> None:
        self._v, self.store_url, self.max_model_len = 0, "s", 1

    @property
    def version(self) -> int:
        _Counted.reads += 1
        return self._v

    async def sync(self, store_url: str, version: int | None) -> int:
        self._v = version or 0
        return self._v


def test_engine_pool_reads_every_engine_once_per_change_not_per_group():
    async def go():
        async def activate(m):
            return m.handle

        engines = [_Counted() for _ in range(100)]
        fleet = Fleet("engine", engines, activate, lambda i: engines[i])
        await fleet.start()
        pool = EnginePool(fleet, tokenizer=None)
        _Counted.reads = 0
        for _ in range(50):  # what the pipeline asks once per group
            assert pool.version == 0
            assert not pool.stale("s", 0)
        assert _Counted.reads <= 2 * len(engines)  # was 50 groups x 2 scans x 100 engines
        assert pool.stale("s", 1)  # a newer version: every engine is read again
        await pool.sync_to("s", 1)
        assert pool.version == 1 and not pool.stale("s", 1)
        fleet.mark_dead(fleet.members[0], "test")
        engines[1]._v = 0  # a death changes the live set: the cache is not trusted
        assert pool.version == 0
        await fleet.close()

    asyncio.run(go())


def test_a_run_keeps_the_collector_off_its_live_rollouts_and_restores_it(monkeypatch):
    import contextlib
    import gc

    from inhabit.orchestrator import pipeline
    from inhabit.orchestrator.pipeline import CONTROL_PLANE_GC_THRESHOLD, control_plane_gc

    before = gc.get_threshold()
    with control_plane_gc():
        assert gc.get_threshold() == CONTROL_PLANE_GC_THRESHOLD
        assert gc.get_freeze_count() > 0  # what existed at the start is out of every scan
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0

    def collections_during_a_run() -> int:
        count = 0

        def record(phase: str, info: dict) -> None:
            nonlocal count
            count += phase == "start"

        gc.callbacks.append(record)
        try:
            simulate(small(seed=5, sandboxes=256))  # the real pipeline under the simulator
        finally:
            gc.callbacks.remove(record)
        return count

    with_the_run_settings = collections_during_a_run()
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    monkeypatch.setattr(pipeline, "control_plane_gc", contextlib.nullcontext)
    with_python_defaults = collections_during_a_run()
    assert with_python_defaults >= 20  # measured: 58 here, and 1 under the run's settings
    assert with_the_run_settings * 5 <= with_python_defaults
