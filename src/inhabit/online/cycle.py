"""`inhabit online run`: the cycle that turns rated sessions into a new served version.

    sessions + signals (store.py)
          |  harvest: unused sessions with a reward, settled; stale / corrupt / untrainable ones
          v           are consumed without training (counted)
    cycle row 'training' + ledger entries        <- ONE transaction: the sessions are now taken
          |  train: deployed checkpoint -> online_update (train.py) -> candidate checkpoint
          v
    gate (gate.py) -- refused --> cycle 'refused' (sessions stay consumed; nothing served)
          |  passed
          v
    cycle 'publishing' -> Publisher.publish(candidate, version) -> cycle 'published' + baseline
          |                                                         (one transaction)
          v
    watch (watch.py), at the start of every cycle: the newest version's live acceptance against
    its parent's; worse with confidence -> republish the parent's weights as a new version
    ('rollback'), the bad one is marked 'rolled_back'

Crash safety. Every step's outcome is either in the store (SQLite transactions) or in files
written atomically (checkpoints: rename; weight versions: manifest last). On start, `recover`
looks at every cycle left unfinished: if its weight version exists in the weight store (the crash
came after the publish), the cycle is completed as published; otherwise its row and its ledger
entries are deleted in one transaction, and its sessions are harvested again. So a session is
consumed by exactly one finished cycle, and the served lineage trains on it at most once.

`on_step(name)`, when set, is called between steps (tests use it to crash at each of them).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from inhabit.errors import OnlineError
from inhabit.log import get_logger
from inhabit.online.config import OnlineConfig
from inhabit.online.rewards import reward_of
from inhabit.online.store import CorruptSession, CycleRow, SessionStore
from inhabit.online.train import Episode, episode_samples, next_baseline, online_update
from inhabit.types import TRAINABLE_STATUSES, Trajectory

log = get_logger(__name__)

UNFINISHED = ("training", "gating", "publishing", "rolling_back")


@dataclass
class Harvest:
    episodes: list[Episode] = field(default_factory=list)
    consumed: dict[str, str] = field(default_factory=dict)
    """session id -> ledger status (trained, stale, corrupt, untrainable)."""
    oldest_rated_at: float | None = None
    counts: dict[str, int] = field(default_factory=dict)


def _trainable_tokens(traj: Trajectory) -> bool:
    return any(t.completion_token_ids and t.logprobs for s in traj.segments for t in s.turns)


class OnlineLoop:
    """One online deployment: a session store, a weight store, and a work folder of checkpoints."""

    def __init__(self, config: OnlineConfig, *, on_step: Callable[[str], None] | None = None) -> None:
        from inhabit.weights.store import Store

        self.config = config
        self.store = SessionStore(config.store)
        self.weights = Store(config.weights)
        self.workdir = config.workdir_path()
        self.on_step = on_step or (lambda _name: None)
        self._publisher: Any = None

    def close(self) -> None:
        self.store.close()

    # ------------------------------------------------------------------ files

    def checkpoint(self, version: int) -> Path:
        from inhabit.trainer.checkpoint import checkpoint_name

        return self.workdir / "checkpoints" / checkpoint_name(version)

    def _has_checkpoint(self, version: int) -> bool:
        from inhabit.trainer.checkpoint import STATE_FILE

        return (self.checkpoint(version) / STATE_FILE).is_file()

    def _published(self, version: int) -> bool:
        try:
            self.weights.manifest(version)
        except Exception:  # VersionNotFound, or a manifest cut short: not published
            return False
        return True

    def _publish(self, state: dict[str, Any], version: int) -> None:
        from inhabit.weights.publish import Publisher, PublisherConfig

        if self._publisher is None:
            cfg = PublisherConfig(dtype=self.config.publish_dtype, full_every=self.config.full_every)
            self._publisher = Publisher(self.weights, cfg)
        self._publisher.publish(state, version=version)

    def _trainer(self, version: int) -> Any:
        from inhabit.trainer.trainer import Trainer

        path = self.checkpoint(version)
        return Trainer.from_pretrained(path, self.config.train.trainer).load(path)

    def warm_up(self) -> None:
        """Run one throwaway update on the deployed checkpoint: a process's first model load,
        forward, backward and optimizer step pay for imports and lazy kernel set-up (seconds on a
        CPU), which belongs before the first signal, not after it."""
        import torch

        import inhabit.weights.publish  # noqa: F401
        from inhabit.trainer.samples import Sample

        dep = self.store.deployed()
        if dep is None or dep.version is None or not self._has_checkpoint(dep.version):
            return
        trainer = self._trainer(dep.version)
        n = 32
        mask = torch.zeros(n, dtype=torch.bool)
        mask[n // 2 :] = True
        sample = Sample(
            input_ids=torch.randint(0, min(256, trainer.model.config.vocab_size), (n,)),
            loss_mask=mask,
            behaviour_logprobs=torch.zeros(n),
            versions=torch.zeros(n, dtype=torch.long),
            advantage=1.0,
        )
        online_update(trainer, [sample], self.config.train)
        trainer.state_dict_for_engine()

    def next_version(self) -> int:
        known = [c.version for c in self.store.cycles() if c.version is not None]
        latest = self.weights.latest()
        return max([*known, -1 if latest is None else latest]) + 1

    # ------------------------------------------------------------------ set-up and recovery

    def init(self, model: str | Path) -> int:
        """Version the model folder as the first deployed version (checkpoint + weight store)."""
        from inhabit.trainer.trainer import Trainer

        self.recover()
        if (dep := self.store.deployed()) is not None:
            raise OnlineError(f"{self.config.store} is already set up (version {dep.version} is deployed)")
        version = self.next_version()
        trainer = Trainer.from_pretrained(model, self.config.train.trainer, version=version)
        trainer.save(self.checkpoint(version))
        self._publish(trainer.state_dict_for_engine(), version)
        cycle = self.store.start_cycle(version, None, "published", {})
        self.store.update_cycle(cycle, finished_at=time.time(), note=f"initial: {Path(model).name}")
        return version

    def recover(self) -> list[str]:
        """Finish or undo every cycle a crash left unfinished (see the module docstring)."""
        done = []
        for c in self.store.cycles():
            if c.status not in UNFINISHED:
                continue
            if c.version is not None and self._published(c.version) and self._has_checkpoint(c.version):
                if c.status == "rolling_back":
                    self._finish_rollback(c)
                else:
                    self._finish_publish(c)
                done.append(f"cycle {c.id}: completed (version {c.version} had been published)")
            else:
                self.store.abandon_cycle(c.id)
                done.append(f"cycle {c.id}: undone ({len(c.sessions)} session(s) back in the pool)")
        for line in done:
            log.info("recover: %s", line)
        return done

    # ------------------------------------------------------------------ harvest

    def harvest(self) -> Harvest:
        """Rated, settled, unused sessions, oldest first (at most cycle.max_sessions trained)."""
        cfg = self.config
        rows = {r.id: r for r in self.store.sessions()}
        deployed = self.store.deployed()
        dep_v = deployed.version if deployed is not None and deployed.version is not None else 0
        now, h = time.time(), Harvest()
        counts = dict.fromkeys(("trained", "stale", "corrupt", "untrainable", "unrated", "settling"), 0)
        for sid in self.store.unused_ids():
            row = rows.get(sid)
            if row is None:
                continue
            reward = reward_of(row.signals, cfg.rewards)
            if reward is None:
                counts["unrated"] += 1
                continue
            if now - max(s.at for s in row.signals) < cfg.rewards.settle_s:
                counts["settling"] += 1
                continue
            try:
                record = self.store.record(sid)
                traj = Trajectory.model_validate(record["trajectory"])
            except (CorruptSession, ValidationError) as e:
                log.warning("session %s skipped: %s", sid, str(e).splitlines()[0])
                status = "corrupt"
            else:
                versions = [v for tv in record.get("turn_versions") or [] for v in tv or [] if v >= 0]
                if traj.status not in TRAINABLE_STATUSES or not _trainable_tokens(traj) or not versions:
                    status = "untrainable"
                elif dep_v - min(versions) > cfg.train.max_lag:
                    status = "stale"
                else:
                    if len(h.episodes) >= cfg.cycle.max_sessions:
                        continue
                    status = "trained"
                    h.episodes.append(Episode(sid, traj, reward))
                    first = min(s.at for s in row.signals)
                    h.oldest_rated_at = first if h.oldest_rated_at is None else min(h.oldest_rated_at, first)
            h.consumed[sid] = status
            counts[status] += 1
        h.counts = counts
        return h

    def due(self, h: Harvest) -> bool:
        if len(h.episodes) >= self.config.cycle.min_sessions:
            return True
        return bool(h.episodes) and time.time() - (h.oldest_rated_at or 0) >= self.config.cycle.max_wait_s

    # ------------------------------------------------------------------ the cycle

    def run_cycle(self) -> CycleRow | None:
        """Recover, watch, and run one cycle if one is due; returns its row (None: nothing due)."""
        self.recover()
        deployed = self.store.deployed()
        if deployed is None or deployed.version is None:
            raise OnlineError(f"{self.config.store} has no deployed version; run `inhabit online init` first")
        self.watch()
        deployed = self.store.deployed()
        assert deployed is not None and deployed.version is not None
        h = self.harvest()
        self.on_step("harvested")
        if not self.due(h):
            return None
        target = self.next_version()
        baseline = self.store.state("baseline")
        cycle = self.store.start_cycle(
            target, deployed.version, "training", h.consumed, train={"counts": h.counts, "baseline": baseline}
        )
        self.on_step("consumed")
        rewards = [e.reward for e in h.episodes]
        new_baseline = next_baseline(baseline, rewards, self.config.train.baseline_decay)
        t0 = time.perf_counter()
        samples = episode_samples(h.episodes, baseline)
        samples_s = time.perf_counter() - t0
        train_info: dict[str, Any] = {
            "counts": h.counts,
            "baseline": baseline,
            "reward_mean": sum(rewards) / len(rewards),
            "samples_s": round(samples_s, 3),
        }
        if not any(s.num_loss_tokens for s in samples):
            self.store.commit(
                {
                    cycle: {
                        "status": "empty",
                        "version": None,
                        "finished_at": time.time(),
                        "train": train_info,
                        "note": "no sample with a gradient",
                    }
                },
                {"baseline": new_baseline},
            )
            return self._row(cycle)
        t0 = time.perf_counter()
        trainer = self._trainer(deployed.version)
        load_s = time.perf_counter() - t0
        train_info |= online_update(trainer, samples, self.config.train)
        trainer.version = target
        self.on_step("trained")
        t0 = time.perf_counter()
        trainer.save(self.checkpoint(target))
        train_info |= {"load_s": round(load_s, 3), "save_s": round(time.perf_counter() - t0, 3)}
        self.store.update_cycle(cycle, status="gating", train=train_info)
        self.on_step("saved")
        gate = self.gate(cycle, target, deployed)
        self.on_step("gated")
        if not gate["passed"]:
            shutil.rmtree(self.checkpoint(target), ignore_errors=True)
            self.store.commit(
                {cycle: {"status": "refused", "gate": gate, "finished_at": time.time()}},
                {"baseline": new_baseline},
            )
            return self._row(cycle)
        self.store.update_cycle(cycle, status="publishing", gate=gate)
        self.on_step("publishing")
        t0 = time.perf_counter()
        self._publish(trainer.state_dict_for_engine(), target)
        train_info["publish_s"] = round(time.perf_counter() - t0, 3)
        self.store.update_cycle(cycle, train=train_info)
        self.on_step("published")
        self._finish_publish(self._row(cycle), {"baseline": new_baseline})
        return self._row(cycle)

    def _finish_publish(self, c: CycleRow, state: dict[str, Any] | None = None) -> None:
        if state is None:  # recovering: recompute what the cycle would have stored
            rewards = (c.train or {}).get("reward_mean")
            base = (c.train or {}).get("baseline")
            state = (
                {}
                if rewards is None
                else {"baseline": next_baseline(base, [rewards], self.config.train.baseline_decay)}
            )
        self.store.commit({c.id: {"status": "published", "finished_at": time.time()}}, state)

    def _row(self, cycle: int) -> CycleRow:
        return next(c for c in self.store.cycles() if c.id == cycle)

    def gate(self, cycle: int, version: int, deployed: CycleRow) -> dict[str, Any]:
        from inhabit.online.gate import decide, evaluate

        cfg = self.config.gate
        if cfg.tasks is None:
            return {"passed": True, "summary": "no gate"}
        root = self.workdir / "gate"
        base = (deployed.gate or {}).get("success_rate")
        if base is None:  # the deployed version's own score, measured once
            assert deployed.version is not None
            score = evaluate(
                self.checkpoint(deployed.version), root / f"version-{deployed.version}.jsonl", cfg
            )
            base = score["success_rate"]
            self.store.update_cycle(deployed.id, gate={**(deployed.gate or {}), **score, "passed": True})
        score = evaluate(self.checkpoint(version), root / f"cycle-{cycle}.jsonl", cfg)
        passed = decide(score["success_rate"], base, cfg.tolerance)
        summary = f"{score['success_rate']:.2f} vs {base:.2f} ({'pass' if passed else 'REFUSED'})"
        return {**score, "deployed_success_rate": base, "passed": passed, "summary": summary}

    # ------------------------------------------------------------------ watch and rollback

    def watch(self) -> dict[str, Any] | None:
        """Live figures of the deployed version; roll it back when it is worse than its parent."""
        from inhabit.online.watch import acceptance, live_figures

        cfg = self.config.watch
        dep = self.store.deployed()
        if dep is None or dep.version is None:
            return None
        acc = acceptance(self.store.sessions(), self.config.rewards)
        new = acc.get(dep.version, (0, 0))
        old = acc.get(dep.parent) if dep.parent is not None else None
        live = live_figures(new, old, cfg.confidence)
        if live != dep.live:
            self.store.update_cycle(dep.id, live=live)
        worse = "diff_ci" in live and live["diff_ci"][1] < 0
        if (
            dep.status == "published"
            and dep.parent is not None
            and cfg.rollback
            and worse
            and new[1] >= cfg.min_sessions
        ):
            self.rollback(dep, live)
        return live

    def rollback(self, bad: CycleRow, live: dict[str, Any]) -> int:
        """Serve the parent's weights again, as a new version; mark `bad` rolled back."""
        assert bad.parent is not None
        target = self.next_version()
        lo, hi = live["diff_ci"]
        note = f"rollback of {bad.version}: acceptance vs {bad.parent} in [{lo:+.2f}, {hi:+.2f}]"
        cycle = self.store.start_cycle(target, bad.parent, "rolling_back", {})
        self.store.update_cycle(cycle, note=note)
        self.on_step("rollback_started")
        trainer = self._trainer(bad.parent)
        trainer.version = target
        trainer.save(self.checkpoint(target))
        self._publish(trainer.state_dict_for_engine(), target)
        self.on_step("rollback_published")
        self._finish_rollback(self._row(cycle), bad.id)
        log.warning("%s", note)
        return target

    def _finish_rollback(self, c: CycleRow, bad_id: int | None = None) -> None:
        if bad_id is None:  # recovering: the rolled-back cycle is the newest published one below it
            bad = [
                x
                for x in self.store.cycles()
                if x.status == "published" and x.id < c.id and x.parent == c.parent
            ]
            bad_id = bad[-1].id if bad else None
        updates: dict[int, dict[str, Any]] = {c.id: {"status": "rollback", "finished_at": time.time()}}
        if bad_id is not None:
            updates[bad_id] = {"status": "rolled_back"}
        self.store.commit(updates)

    # ------------------------------------------------------------------ forever

    def run(
        self,
        *,
        max_cycles: int | None = None,
        until_idle: bool = False,
        on_cycle: Callable[[CycleRow], None] | None = None,
    ) -> int:
        """Cycle after cycle (sleeping `cycle.poll_s` when none is due); returns cycles run."""
        ran = 0
        while max_cycles is None or ran < max_cycles:
            row = self.run_cycle()
            if row is None:
                if until_idle:
                    break
                time.sleep(self.config.cycle.poll_s)
                continue
            ran += 1
            if on_cycle is not None:
                on_cycle(row)
        return ran
