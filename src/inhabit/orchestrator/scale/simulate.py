"""`simulate(cfg)`: one scenario of the real orchestration code on simulated parts, on virtual time.

What runs unchanged: `Pipeline` (producer, trainer loop, `GroupBuffer` with the staleness bound),
`DispatchRunner` (slots, least-outstanding placement through `Fleet`, oversampling, deadlines,
retries on a lost engine or env server), `EnginePool` and `StoreWeightSync` (every live engine
pulls each new version), `guarded_rollout` and the sample building of `group_samples`. What is
simulated: the engines, env servers, episodes and the trainer (`inhabit.orchestrator.scale.parts`).

The event loop is looptime's (`looptime.new_event_loop`): its clock jumps to the next timer
whenever nothing is ready, so `asyncio.sleep(30)` in a simulated grader costs no wall time while
every `loop.time()` the real code reads is virtual. The control plane's own cost is the process
CPU time spent per finished rollout (the simulated parts' bookkeeping included: an upper bound).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any

import looptime

from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.pipeline import Pipeline
from inhabit.orchestrator.scale.config import ScaleConfig
from inhabit.orchestrator.scale.parts import (
    ClusterLink,
    SimEngine,
    SimEnvServer,
    SimPolicy,
    SimTrainer,
    sim_episode,
)
from inhabit.placement.config import RayConfig
from inhabit.placement.dispatch import DispatchRunner
from inhabit.placement.engines import EnginePool
from inhabit.placement.fleet import Fleet, Member
from inhabit.placement.weight_sync import StoreWeightSync
from inhabit.rollouts import guarded_rollout
from inhabit.tasks.task import Task
from inhabit.types import Trajectory

STORE = "sim://store"


class SimDispatchRunner(DispatchRunner):
    """The real `DispatchRunner` with a simulated episode in place of the harness's."""

    def __init__(self, *args: Any, sim: ScaleConfig, tokens_by_group: dict[str, int], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sim = sim
        self.rng = random.Random(sim.seed * 31 + 7)
        self.tokens_by_group = tokens_by_group

    async def _episode_on(
        self, task: Task, lease: Any, provider: Any, left: float | None
    ) -> Trajectory | None:
        policy: Any = SimPolicy(lease, self.sim.episode, self.rng)
        if self.wrap_policy is not None:
            policy = self.wrap_policy(policy, lease)
        return await guarded_rollout(
            task, policy, provider, self.harness, self.cfg.timeout_s, deadline_s=left, rollout_fn=sim_episode
        )

    async def run_group(
        self, task: Task, index: int, *, purpose: str = "train", size: int | None = None
    ) -> Any:
        group = await super().run_group(task, index, purpose=purpose, size=size)
        self.tokens_by_group[f"{group.task_id}#{group.index}"] = sum(
            (t.prompt_tokens or 0) + (t.completion_tokens or 0)
            for traj in group.trajectories
            for s in traj.segments
            for t in s.turns
        )
        return group


def _run_config(cfg: ScaleConfig) -> RunConfig:
    return RunConfig.model_validate(
        {
            "model": {"preset": "dense-1m"},  # unused: nothing is loaded
            "tasks": {"source": "quickstart"},  # unused: the tasks are `_tasks(cfg.tasks)`
            "mode": cfg.mode,
            "max_staleness": cfg.max_staleness,
            "stale_policy": cfg.stale_policy,
            "partial_age": cfg.partial_age,
            "steps": cfg.steps,
            "seed": cfg.seed,
            "rollout": {
                "group_size": cfg.group_size,
                "tasks_per_step": cfg.groups_per_step,
                "concurrency": cfg.sandboxes,
                "timeout_s": cfg.timeout_s,
                "max_tokens": 1 << 16,
            },
            "harness": {"max_turn_tokens": 1 << 16},
        }
    )


def _tasks(n: int) -> list[Task]:
    root = Path("/nonexistent/sim-task")
    return [Task(f"sim-{i:06d}", "", root, root, None, None, None) for i in range(n)]


async def _faults(
    cfg: ScaleConfig, engines: list[SimEngine], servers: list[SimEnvServer], rng: random.Random
) -> None:
    f = cfg.faults
    rates = [
        (f.engine_crashes_per_engine_hour * len(engines) / 3600, lambda: rng.choice(engines).crash()),
        (f.env_server_losses_per_server_hour * len(servers) / 3600, lambda: rng.choice(servers).lose()),
    ]
    rates = [(r, hit) for r, hit in rates if r > 0]
    if not rates:
        return
    total = sum(r for r, _ in rates)
    while True:
        await asyncio.sleep(rng.expovariate(total))
        x = rng.random() * total
        for r, hit in rates:
            if x < r:
                hit()
                break
            x -= r


async def _simulate(cfg: ScaleConfig) -> dict[str, Any]:
    rng = random.Random(cfg.seed)
    f = cfg.faults
    shares = [c.share for c in cfg.network.clusters]
    links = [ClusterLink(i, c) for i, c in enumerate(cfg.network.clusters)]
    engines: list[SimEngine] = []
    for i in range(cfg.engines):
        link = links[_cluster_of(i, cfg.engines, shares)]
        slow = f.slow_factor if rng.random() < f.slow_fraction else 1.0
        e = SimEngine(i, cfg.engine, link, slow=slow, delta_bytes=cfg.network.delta_bytes)
        link.engines.append(e)
        engines.append(e)
    servers = [
        SimEnvServer(
            i, slow=f.slow_factor if rng.random() < f.slow_fraction else 1.0, restart_s=f.env_server_restart_s
        )
        for i in range(cfg.env_servers)
    ]
    sync = StoreWeightSync(STORE, 0)

    async def activate_engine(m: Member) -> SimEngine:
        e: SimEngine = m.handle
        return e if m.deaths == 0 else await e.restart(sync.latest, STORE)

    async def activate_server(m: Member) -> SimEnvServer:
        s: SimEnvServer = m.handle
        return s if m.deaths == 0 else await s.restart()

    engine_fleet = Fleet("engine", engines, activate_engine, lambda i: engines[i])
    server_fleet = Fleet("env server", servers, activate_server, lambda i: servers[i])
    await engine_fleet.start()
    await server_fleet.start()
    pool = EnginePool(engine_fleet, tokenizer=None)
    run_cfg = _run_config(cfg)
    tokens_by_group: dict[str, int] = {}
    runner = SimDispatchRunner(
        pool, None, None,
        env_servers=server_fleet,
        ray=RayConfig(oversample=cfg.oversample, deadline_s=cfg.deadline_s, probe_timeout_s=5.0),
        harness=run_cfg.harness, rollout=run_cfg.rollout, seed=cfg.seed,
        sim=cfg, tokens_by_group=tokens_by_group,
    )  # fmt: skip
    trainer = SimTrainer(cfg.trainer, tokens_by_group)
    loop = asyncio.get_running_loop()
    marks: dict[str, Any] = {}

    def snapshot() -> dict[str, Any]:
        return {
            "t": loop.time(),
            "cpu": time.process_time(),
            "busy": sum(e.busy_s for e in engines),
            "batch": sum(e.batch_s for e in engines),
            "finished": runner.finished,
            "counts": Counter(runner.counts),
            "wait": pipeline.trainer_wait_s,
            "train": pipeline.trainer_busy_s,
            "staleness": Counter(trainer.staleness),
            "link": [lk.link_bytes for lk in links],
            "version": trainer.version,
            "pause": sum(e.pause_s for e in engines),
            "swaps": sum(e.swaps for e in engines),
            "stale_dropped": pipeline.buffer.dropped_stale,
            "dropped_tokens": pipeline.buffer.dropped_tokens,
            "stale_tokens": pipeline.stale_engine_tokens,
            "engine_tokens": sum(e.tokens for e in engines),
            "pauses": pipeline.gate.pauses,
            "regenerated": pipeline.buffer.regenerated,
            "stale_rollouts": pipeline.stale_rollouts,
        }

    def on_step(step: int, record: dict[str, Any]) -> None:
        if cfg.measure == "whole":
            return
        if step == cfg.margin_steps:
            marks["start"] = snapshot()
        elif step == cfg.margin_steps + cfg.measure_steps:
            marks["end"] = snapshot()  # and stop: the run's last steps would only drain it

    def done() -> bool:
        return "end" in marks

    pipeline = Pipeline(run_cfg, runner, trainer, sync, _tasks(cfg.tasks), on_step=on_step, should_stop=done)
    marks["begin"] = snapshot()
    faults = asyncio.create_task(_faults(cfg, engines, servers, random.Random(cfg.seed + 1)))
    try:
        await pipeline.run(cfg.steps)
    finally:
        faults.cancel()
        await asyncio.gather(faults, return_exceptions=True)
    if cfg.measure == "whole":
        marks["start"], marks["end"] = marks["begin"], snapshot()
    start, end = marks["start"], marks["end"]
    await engine_fleet.close()
    await server_fleet.close()
    return _report(cfg, start, end, engines, servers, links)


def _cluster_of(i: int, n: int, shares: list[float]) -> int:
    total, acc, x = sum(shares), 0.0, (i + 0.5) / n
    for c, s in enumerate(shares):
        acc += s / total
        if x < acc:
            return c
    return len(shares) - 1


def _report(
    cfg: ScaleConfig,
    a: dict[str, Any],
    b: dict[str, Any],
    engines: list[SimEngine],
    servers: list[SimEnvServer],
    links: list[ClusterLink],
) -> dict[str, Any]:
    window = max(1e-9, b["t"] - a["t"])
    finished = b["finished"] - a["finished"]
    counts = b["counts"] - a["counts"]
    busy = b["busy"] - a["busy"]
    wait, train = b["wait"] - a["wait"], b["train"] - a["train"]
    stale = b["staleness"] - a["staleness"]
    n_stale = max(1, sum(stale.values()))
    versions = max(1, b["version"] - a["version"])
    started = finished + counts["lost_to_deadline"] + counts["cut_surplus"]
    return {
        "name": cfg.name,
        "engines": cfg.engines,
        "sandboxes": cfg.sandboxes,
        "env_servers": cfg.env_servers,
        "groups_per_step": cfg.groups_per_step,
        "max_staleness": cfg.max_staleness,
        "stale_policy": cfg.stale_policy,
        "trainer_ranks": cfg.trainer.data_parallel,
        "oversample": cfg.oversample,
        "deadline_s": cfg.deadline_s,
        "clusters": len(links),
        "simulated_s": round(window, 2),
        "steps_measured": cfg.measure_steps,
        "rollouts": finished,
        "rollouts_per_hour": finished / window * 3600,
        "rollouts_per_min": finished / window * 60,
        "engine_utilization": busy / (window * cfg.engines),
        "mean_batch": (b["batch"] - a["batch"]) / max(1e-9, busy),
        "trainer_idle": wait / max(1e-9, wait + train),
        "staleness": {str(k): round(v / n_stale, 4) for k, v in sorted(stale.items())},
        "lost_to_deadline": counts["lost_to_deadline"] / max(1, started),
        "cut_surplus": counts["cut_surplus"],
        "retried": counts["retried"],
        "resumed": counts["resumed"],
        "dropped_stale_groups": b["stale_dropped"] - a["stale_dropped"],
        # engine tokens that trained nothing because of the bound: those of the groups it dropped
        # (their tasks run again) and those it took out of the loss token by token
        "wasted_share": min(
            1.0,
            (b["dropped_tokens"] - a["dropped_tokens"] + b["stale_tokens"] - a["stale_tokens"])
            / max(1, b["engine_tokens"] - a["engine_tokens"]),
        ),
        "partial_pauses": b["pauses"] - a["pauses"],
        "groups_regenerated": b["regenerated"] - a["regenerated"],
        # rollouts that trained nothing: those of dropped groups, and those whose every token fell
        # out of the bound
        "rollouts_thrown_away": (
            (b["stale_dropped"] - a["stale_dropped"]) * cfg.group_size
            + b["stale_rollouts"]
            - a["stale_rollouts"]
        )
        / max(1, finished),
        "sync_bytes_per_cluster_per_version": [
            round((y - x) / versions) for x, y in zip(a["link"], b["link"], strict=True)
        ],
        "swap_pause_per_engine_s": (b["pause"] - a["pause"]) / max(1, b["swaps"] - a["swaps"]),
        "pause_share": (b["pause"] - a["pause"]) / (window * cfg.engines),
        "engine_crashes": sum(e.crashes for e in engines),
        "env_server_losses": sum(s.lost_count for s in servers),
        "cpu_s": b["cpu"] - a["cpu"],
        "cpu_ms_per_rollout": (b["cpu"] - a["cpu"]) / max(1, finished) * 1e3,
    }


def simulate(cfg: ScaleConfig) -> dict[str, Any]:
    """Run one scenario on a fresh looptime event loop; the figures of the measured window
    (`ScaleConfig.measure_steps`), see `_report`. Also reports the wall time it took."""
    # noop_cycles=0: advance to the next timer as soon as nothing is ready (looptime's default
    # idles 42 loop cycles first, a guard for test code that costs a simulation ~20x the CPU).
    loop = looptime.new_event_loop(start=0.0, noop_cycles=0)
    # Timers due within `quantum_s` of each other run in one loop cycle (asyncio's own batching,
    # widened from the clock's 1 ns): each cycle costs looptime a poll and bookkeeping.
    loop._clock_resolution = cfg.quantum_s  # type: ignore[attr-defined]
    t0 = time.perf_counter()
    # Dispatch logs each retry and each actor down/back; a scenario with faults has thousands
    # (the report counts them).
    placement_log = logging.getLogger("inhabit.placement")
    level = placement_log.level
    placement_log.setLevel(logging.ERROR)
    try:
        out = loop.run_until_complete(_simulate(cfg))
    finally:
        loop.close()
        placement_log.setLevel(level)
    out["wall_s"] = round(time.perf_counter() - t0, 2)
    return out
