"""`RayPlacement` and `train_on_ray`: one run with its parts as Ray actors.

`inhabit train` with `placement.backend = "ray"` calls `train_on_ray`, which joins the cluster,
then runs the ordinary run (`inhabit.orchestrator.run._train`) with this placement plugged in:

    trainer      a TrainerActor      (placement.ray.trainer resources)      publishes to the store
    engines      N EngineActors      (placement.ray.engine resources)       pull from the store
    sandboxes    M EnvServerActors   (placement.ray.env_server resources)   HTTP, RemoteSandboxProvider
    driver       the pipeline, the harness loop of every episode, grading calls, metrics, logs

Engines and env servers live for the whole run (`max_restarts=-1`: Ray restarts one whose node
died as soon as capacity returns). The trainer is not restarted in place: when it dies the run
ends its current attempt and `train_on_ray` resumes from the newest checkpoint (as
`inhabit train --resume` would) with a new trainer actor and a fresh weight-store folder
(`<weights>/iNNN`: version numbers restart at the checkpoint's), keeping engines and env servers.
"""

from __future__ import annotations

import asyncio
import functools
import os
import secrets
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import inhabit
from inhabit.errors import ConfigError, OrchestratorError
from inhabit.log import get_logger
from inhabit.placement.actors import EngineActor, EnvServerActor, TrainerActor
from inhabit.placement.config import RayConfig
from inhabit.placement.fleet import Fleet, Member
from inhabit.placement.trainer import RayTrainer, TrainerLost

log = get_logger(__name__)


def runtime_env() -> dict[str, Any]:
    """Make actors import this very `inhabit` (a checkout on a shared path; elsewhere: install it)."""
    src = str(Path(inhabit.__file__).resolve().parents[1])
    path = os.pathsep.join(p for p in (src, os.environ.get("PYTHONPATH", "")) if p)
    return {"env_vars": {"PYTHONPATH": path, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}}


class RayPlacement:
    """Creates and keeps the actors of one run; hands the run its Ray-backed parts."""

    current: RayPlacement | None = None
    """The newest placement of this process (for tests and tools that inject faults)."""

    def __init__(self, cfg: Any) -> None:
        RayPlacement.current = self
        self.cfg = cfg
        self.rc: RayConfig = cfg.placement.ray
        if cfg.sandbox.backend == "remote":
            raise ConfigError(
                "placement.backend='ray' starts its own env servers: set sandbox.backend to auto, bwrap or process"
            )
        self.token = secrets.token_urlsafe(24)
        self.weights_root = self.rc.weights_dir or str(Path(cfg.run_dir) / "weights")
        self.engine_handles: list[Any] = []
        self.env_handles: list[Any] = []
        self.trainer_handle: Any = None
        self.store_url: str | None = None
        self.incarnation = 0
        self.trainer_restarts = 0
        self._owns_ray = False
        self._fleets: list[Fleet] = []
        self.engines: Fleet | None = None
        self.env_servers: Fleet | None = None

    # ------------------------------------------------------------------ cluster
    def connect(self) -> None:
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
            .remote(model_dir, self.cfg.engine.model_dump(), f"engine-{i}", rc.engine.num_cpus)
        )

    def _env_actor(self, i: int) -> Any:
        import ray

        return (
            ray.remote(EnvServerActor)
            .options(max_restarts=-1, max_task_retries=0, **self.rc.env_server.options())
            .remote(self.cfg.sandbox.model_dump(), self.token, self.rc.bind_host)
        )

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
                str(model_dir), self.cfg.trainer.model_dump(), str(checkpoint) if checkpoint else None,
                self.store_url, self.cfg.engine.dtype, rc.trainer.num_cpus,
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

    async def start_engines(self, model_dir: Path) -> Any:
        """The engine pool (actors created on the first call, kept for the whole run)."""
        from inhabit.models.loading import load_tokenizer
        from inhabit.placement.engines import EnginePool, RayEngine

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
    async def setup(self, model_dir: Path, checkpoint: Path | None) -> tuple[Any, dict, Any, Callable, Any]:
        """(trainer handle, data state, engine, runner factory, weight sync) for `run._train`."""
        from inhabit.placement.dispatch import DispatchRunner
        from inhabit.placement.weight_sync import StoreWeightSync

        handle, data_state = await self.start_trainer(model_dir, checkpoint)
        engine = await self.start_engines(model_dir)
        env = await self.start_env_servers()
        assert self.store_url is not None
        sync = StoreWeightSync(self.store_url, handle.version, dtype=self.cfg.engine.dtype)
        await sync.apply(engine)
        runner = functools.partial(DispatchRunner, env_servers=env, ray=self.rc, run_attempt=self.incarnation)
        return handle, data_state, engine, runner, sync

    def metrics(self, runner: Any) -> dict[str, Any]:
        out = runner.metrics() if hasattr(runner, "metrics") else {}
        return {**out, "trainer_restarts": self.trainer_restarts, "weights_store": self.store_url}

    async def end_attempt(self) -> None:
        for f in self._fleets:
            await f.close()
            for m in f.members:
                close = getattr(m.payload, "close", None)
                if close is not None and f is self.env_servers:
                    try:
                        await close()
                    except Exception:  # a dead server: its sandboxes died with it
                        pass
        self._fleets.clear()


async def train_on_ray(
    cfg: Any, resume: bool, display: Any, inner: Callable[..., Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """`inner` is `inhabit.orchestrator.run._train`; see the module docstring."""
    from inhabit.trainer.checkpoint import latest_checkpoint

    placement = RayPlacement(cfg)
    placement.connect()
    try:
        while True:
            try:
                summary = await inner(cfg, resume, display, placement=placement)
                summary["trainer_restarts"] = placement.trainer_restarts
                return summary
            except TrainerLost as e:
                if placement.trainer_restarts >= cfg.placement.ray.max_trainer_restarts:
                    raise OrchestratorError(
                        f"{e}; gave up after {placement.trainer_restarts} restarts "
                        "(placement.ray.max_trainer_restarts); `inhabit train --resume` continues"
                    ) from e
                placement.trainer_restarts += 1
                ckpt = latest_checkpoint(Path(cfg.run_dir) / "checkpoints")
                resume = ckpt is not None
                display.say(f"{e}: resuming from {ckpt or 'the start (no checkpoint yet)'}")
            finally:
                await placement.end_attempt()
    finally:
        placement.shutdown()
