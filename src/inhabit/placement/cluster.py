"""`RayPlacement`: the `Placement` of a run whose parts are Ray actors (`placement.backend = "ray"`).

`inhabit.orchestrator.run.train` starts it (joins the cluster) and asks `setup()` for the parts
of each run attempt:

    trainer      a TrainerActor      (placement.ray.trainer resources)      publishes to the store
    engines      N EngineActors      (placement.ray.engine resources)       pull from the store
    sandboxes    M EnvServerActors   (placement.ray.env_server resources)   HTTP, RemoteSandboxProvider
    driver       the pipeline, the harness loop of every episode, grading calls, metrics, logs

Engines and env servers live for the whole run (`max_restarts=-1`: Ray restarts one whose node
died as soon as capacity returns). The trainer is not restarted in place: when it dies its handle
raises `TrainerLost`, the run ends the attempt (`end_attempt`) and calls `setup` again from the
newest checkpoint (as `inhabit train --resume` would), which starts a new trainer actor with a
fresh weight-store folder (`<weights>/iNNN`: version numbers restart at the checkpoint's) and
keeps the engines and env servers.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

import inhabit
from inhabit.contracts import RunParts, TrainerLost
from inhabit.errors import ConfigError, OrchestratorError
from inhabit.log import get_logger
from inhabit.placement.actors import EngineActor, EnvServerActor, TrainerActor
from inhabit.placement.config import RayConfig, RunSettings
from inhabit.placement.dispatch import DispatchRunner
from inhabit.placement.engines import EnginePool
from inhabit.placement.fleet import Fleet, Member
from inhabit.placement.trainer_ray import RayTrainer
from inhabit.rollouts import TrajectoryLog, reward_composer
from inhabit.sandbox.backends import SANDBOX_BACKENDS
from inhabit.sandbox.base import SandboxProvider
from inhabit.trainer.config import TrainerRunSettings

log = get_logger(__name__)


def runtime_env() -> dict[str, Any]:
    """Make actors import this very `inhabit` (a checkout on a shared path; elsewhere: install it)."""
    src = str(Path(inhabit.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}}


class RayPlacement:
    """Creates and keeps the actors of one run; hands the run its Ray-backed parts."""

    def __init__(self, cfg: RunSettings) -> None:
        self.cfg = cfg
        self.rc: RayConfig = cfg.placement.ray
        self.max_trainer_restarts = self.rc.max_trainer_restarts
        if cfg.sandbox.backend not in SANDBOX_BACKENDS.names(local_only=True):
            raise ConfigError(
                "placement.backend='ray' starts its own env servers: set sandbox.backend to "
                + SANDBOX_BACKENDS.choices(local_only=True)
            )
        self.token = secrets.token_urlsafe(24)
        self.weights_root = self.rc.weights_dir or str(Path(cfg.run_dir) / "weights")
        self.engine_handles: list[Any] = []
        self.env_handles: list[Any] = []
        self.trainer_handle: Any = None
        self.store_url: str | None = None
        self.incarnation = 0
        """Trainer actors started so far (one per run attempt)."""
        self._owns_ray = False
        self._fleets: list[Fleet] = []
        self.engines: Fleet | None = None
        self.env_servers: Fleet | None = None

    @property
    def trainer_restarts(self) -> int:
        """Trainer actors started after the first (each after a `TrainerLost`)."""
        return max(0, self.incarnation - 1)

    # ------------------------------------------------------------------ cluster
    def start(self) -> None:
        """Join the cluster (`placement.ray.address`, else RAY_ADDRESS, else a local one)."""
        import ray

        if ray.is_initialized():
            return
        address = self.rc.address or os.environ.get("RAY_ADDRESS")
        ray.init(
            address=address, runtime_env=runtime_env(), include_dashboard=False,
            log_to_driver=False, configure_logging=False,
        )  # fmt: skip
        self._owns_ray = True
        log.info("ray: %s", ray.cluster_resources())

    def shutdown(self) -> None:
        import ray

        if not ray.is_initialized():
            return
        for h in [*self.engine_handles, *self.env_handles, self.trainer_handle]:
            if h is not None:
                try:
                    ray.kill(h, no_restart=True)
                except Exception:  # already gone
                    pass
        if self._owns_ray:
            ray.shutdown()

    # ------------------------------------------------------------------ actors
    def _engine_actor(self, model_dir: str, i: int) -> Any:
        import ray

        rc = self.rc
        return (
            ray.remote(EngineActor)
            .options(max_restarts=-1, max_task_retries=0, max_concurrency=1000, **rc.engine.options())
            .remote(model_dir, self._engine_settings(model_dir), f"engine-{i}", rc.engine.num_cpus)
        )

    def _engine_settings(self, model_dir: str | Path) -> dict[str, Any]:
        # `auto` resolved here, once: engine actors on other nodes must not each pick their own.
        return self.cfg.engine.embedded().model_dump() | {"dtype": self.cfg.engine.dtype_for(model_dir)}

    def _env_actor(self, i: int) -> Any:
        import ray

        return (
            ray.remote(EnvServerActor)
            .options(max_restarts=-1, max_task_retries=0, **self.rc.env_server.options())
            .remote(self.cfg.sandbox.model_dump(), self.token, self.rc.bind_host)
        )

    def trainer_settings(self) -> TrainerRunSettings:
        """The trainer's slice of the run's settings (its actor sizes torch's threads to its CPUs)."""
        return TrainerRunSettings(trainer=self.cfg.trainer, max_staleness=self.cfg.max_staleness)

    async def start_trainer(self, model_dir: Path, checkpoint: Path | None) -> tuple[RayTrainer, dict]:
        """A trainer actor from `checkpoint` (or the starting model) and a fresh weight-store folder."""
        import ray

        self.incarnation += 1
        if self.incarnation == 1 and checkpoint is None and "://" not in self.weights_root:
            shutil.rmtree(self.weights_root, ignore_errors=True)  # a fresh run: no older versions
        root = Path(self.weights_root) if "://" not in self.weights_root else None
        n = self.incarnation
        while root is not None and (root / f"i{n:03d}").exists():  # resumed runs: never reuse one
            n += 1
        self.store_url = f"{self.weights_root.rstrip('/')}/i{n:03d}"
        rc = self.rc
        self.trainer_handle = (
            ray.remote(TrainerActor)
            .options(max_restarts=0, **rc.trainer.options())
            .remote(
                str(model_dir), self.trainer_settings().model_dump(), str(checkpoint) if checkpoint else None,
                self.store_url, self.cfg.engine.dtype_for(model_dir), rc.trainer.num_cpus,
            )
        )  # fmt: skip
        try:
            info = await asyncio.wait_for(self.trainer_handle.info.remote(), self.rc.start_timeout_s)
        except ray.exceptions.RayActorError as e:
            raise TrainerLost(f"the trainer actor did not start: {e}") from e
        except TimeoutError:
            raise OrchestratorError(
                f"the trainer actor did not start within {self.rc.start_timeout_s:g} s: does any node offer "
                f"{rc.trainer.options()} (placement.ray.trainer, `ray start --resources`)?"
            ) from None
        return RayTrainer(self.trainer_handle, info), dict(info.get("data_state", {}))

    async def start_engines(self, model_dir: Path) -> EnginePool:
        """The engine pool (actors created on the first call, kept for the whole run)."""
        from inhabit.models.loading import load_tokenizer
        from inhabit.placement.engines import RayEngine

        if not self.engine_handles:
            self.engine_handles = [self._engine_actor(str(model_dir), i) for i in range(self.rc.engines)]

        async def activate(m: Member) -> RayEngine:
            m.info = await m.handle.ready.remote(self.store_url)
            return RayEngine(m.handle, m.info)

        def recreate(i: int) -> Any:
            self.engine_handles[i] = self._engine_actor(str(model_dir), i)
            return self.engine_handles[i]

        self.engines = Fleet(
            "engine", list(self.engine_handles), activate, recreate, wait_s=self.rc.start_timeout_s
        )
        self._fleets.append(self.engines)
        await self.engines.start()
        return EnginePool(self.engines, load_tokenizer(model_dir))

    async def start_env_servers(self) -> Fleet | None:
        from inhabit.sandbox.remote import RemoteSandboxProvider

        if self.rc.env_servers == 0:
            return None
        if not self.env_handles:
            self.env_handles = [self._env_actor(i) for i in range(self.rc.env_servers)]

        async def activate(m: Member) -> RemoteSandboxProvider:
            info = await m.handle.address.remote()
            m.info = info
            provider = RemoteSandboxProvider(info["url"], self.token, limits=self.cfg.sandbox.limits)
            await provider.health()
            return provider

        def recreate(i: int) -> Any:
            self.env_handles[i] = self._env_actor(i)
            return self.env_handles[i]

        self.env_servers = Fleet(
            "env server", list(self.env_handles), activate, recreate, wait_s=self.rc.start_timeout_s
        )
        self._fleets.append(self.env_servers)
        await self.env_servers.start()
        return self.env_servers

    # ------------------------------------------------------------------ the run's parts
    async def setup(
        self, model_dir: Path, checkpoint: Path | None, provider: SandboxProvider, log_file: TrajectoryLog
    ) -> RunParts:
        """The parts of one run attempt. `provider` (this machine's) serves the rollouts only when
        `placement.ray.env_servers = 0`."""
        from inhabit.placement.weight_sync import StoreWeightSync

        trainer, data_state = await self.start_trainer(model_dir, checkpoint)
        try:
            engine = await self.start_engines(model_dir)
            env = await self.start_env_servers()
            assert self.store_url is not None
            sync = StoreWeightSync(
                self.store_url, trainer.version, dtype=self.cfg.engine.dtype_for(model_dir)
            )
            await sync.apply(engine)
        except BaseException:
            await trainer.close()
            await self.close_fleets()
            raise
        cfg = self.cfg
        runner = DispatchRunner(
            engine, engine.tokenizer, provider, env_servers=env, ray=self.rc, run_attempt=self.incarnation,
            harness=cfg.harness, rollout=cfg.rollout, log_file=log_file, seed=cfg.seed,
            composer=reward_composer(cfg.reward),
        )  # fmt: skip
        return RunParts(trainer=trainer, data_state=data_state, engine=engine, runner=runner, sync=sync)

    def metrics(self, parts: RunParts) -> dict[str, Any]:
        assert isinstance(parts.runner, DispatchRunner)
        return {
            **parts.runner.metrics(),
            "trainer_restarts": self.trainer_restarts,
            "weights_store": self.store_url,
        }

    async def end_attempt(self, parts: RunParts) -> None:
        """Stop this attempt's trainer actor and release the engines and env servers (they stay up)."""
        try:
            await parts.close()
        finally:
            await self.close_fleets()

    async def close_fleets(self) -> None:
        """Stop watching the engine and env-server actors (they stay up for the next attempt)."""
        for f in self._fleets:
            await f.close()
            if f is not self.env_servers:
                continue
            for m in f.members:  # each live server's RemoteSandboxProvider
                if m.payload is not None:
                    try:
                        await m.payload.close()
                    except Exception:  # a dead server: its sandboxes died with it
                        pass
        self._fleets.clear()
