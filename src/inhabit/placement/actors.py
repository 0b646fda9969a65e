"""The three kinds of Ray actor a run places: inference engine, environment server, trainer.

They are plain classes here; `inhabit.placement.cluster` wraps them with `ray.remote(...)` and
the resource requests of `RayConfig` when it creates them, so importing this module needs no Ray.

- `EngineActor`: an `EmbeddedEngine` (continuous batching on the node's CPUs/GPU) plus a weight
  `Subscriber`. Weights never travel through Ray's object store: the actor is told "store S,
  version v" and pulls the version (a delta when it holds the previous one) from the store.
  After a restart it first syncs to the store's newest version, so a replaced engine is current.
- `EnvServerActor`: `inhabit sandbox env-server` (the sandbox HTTP API over a local backend) in a thread
  of the actor, on a free port of the node; the driver reaches it with `RemoteSandboxProvider`.
- `TrainerActor`: an `inhabit.trainer.Trainer`, started from a model folder or the newest
  checkpoint with the run's `TrainerRunSettings` (it re-checks `max_staleness` per sample). After every step it publishes the new version to the weight store itself, so the
  driver only ever receives metrics.

Paths (model folder, checkpoints) must be visible on the node an actor runs on: a shared
filesystem on a real cluster, any path when every node is one machine.
"""

from __future__ import annotations

import asyncio
import os
from typing import TYPE_CHECKING, Any

from inhabit.log import get_logger

if TYPE_CHECKING:
    from inhabit.trainer.samples import Sample

log = get_logger(__name__)


def _threads(num_cpus: float) -> None:
    """Size torch's pool to the CPUs Ray reserved (Ray does not do it for torch)."""
    import torch

    torch.set_num_threads(max(1, int(num_cpus)))


class EngineActor:
    """An embedded inference engine that follows a weight store (see module docstring)."""

    def __init__(self, model_dir: str, engine_config: dict[str, Any], name: str, num_cpus: float) -> None:
        from inhabit.inference.config import EngineConfig
        from inhabit.inference.embedded import EmbeddedEngine

        _threads(num_cpus)
        self.name = name
        self.engine = EmbeddedEngine.from_path(model_dir, EngineConfig.model_validate(engine_config))
        self.store_url: str | None = None
        self.subscriber: Any = None
        self._lock: asyncio.Lock | None = None

    async def ready(self, store_url: str | None) -> dict[str, Any]:
        """Sync to the store's newest version (if any) and report; the pool calls it after every (re)start."""
        import ray

        if store_url is not None and self.subscriber is None:
            await self.sync(store_url, None)
        return {
            "node_id": ray.get_runtime_context().get_node_id(),
            "version": self.engine.version,
            "max_model_len": self.engine.max_model_len,
            "store": self.store_url,
            "pid": os.getpid(),
        }

    async def generate(self, requests: list[Any]) -> list[Any]:
        return await self.engine.generate(requests)

    async def sync(self, store_url: str, version: int | None) -> int:
        """Hold `version` (None: newest) of the store at `store_url`; returns the engine's version."""
        from inhabit.weights.subscribe import Subscriber, SubscriberConfig

        self._lock = self._lock or asyncio.Lock()
        async with self._lock:
            if store_url != self.store_url:  # a new store (e.g. after the trainer resumed): start over
                self.subscriber = Subscriber(store_url, SubscriberConfig(name=self.name, workers=2))
                self.store_url = store_url
            sub = self.subscriber
            if sub.store.latest() is None:
                return self.engine.version
            result = await asyncio.to_thread(sub.sync, version)
            if sub.version is not None and (sub.version != self.engine.version or result.start is None):
                await sub.push(self.engine, result)
            return self.engine.version

    async def load_weights(self, weights: Any, version: int) -> int:
        """A state dict or a model folder path (not the per-step path: that is `sync`)."""
        await self.engine.load_weights(weights, version)
        return self.engine.version

    async def stats(self) -> dict[str, Any]:
        return {**self.engine.stats(), "store": self.store_url, "pid": os.getpid()}


class EnvServerActor:
    """`inhabit sandbox env-server` in a background thread of this actor (see module docstring)."""

    def __init__(self, sandbox_config: dict[str, Any], token: str, bind_host: str | None) -> None:
        import socket
        import threading
        import time

        import ray
        import uvicorn

        from inhabit.sandbox import SandboxConfig, create_provider
        from inhabit.sandbox.server import EnvServerConfig, create_app

        sandbox = SandboxConfig.model_validate(sandbox_config)
        host = bind_host or ray.util.get_node_ip_address()
        config = EnvServerConfig(host=host, port=0, token=token, backend=sandbox.backend)
        app = create_app(lambda: create_provider(sandbox), config, token)
        # IPPROTO_TCP so that asyncio sets TCP_NODELAY on accepted sockets (as the env server does).
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind((host, 0))
        self.url = f"http://{host}:{self._sock.getsockname()[1]}"
        self._server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._sock]}, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the env server did not start in its actor")
            time.sleep(0.02)

    def address(self) -> dict[str, Any]:
        import ray

        return {"url": self.url, "pid": os.getpid(), "node_id": ray.get_runtime_context().get_node_id()}

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(30)


class TrainerActor:
    """The trainer, publishing every new version to the weight store (see module docstring)."""

    def __init__(
        self,
        model_dir: str,
        settings_data: dict[str, Any],
        checkpoint: str | None,
        store_url: str,
        dtype: str,
        num_cpus: float,
    ) -> None:
        from inhabit.trainer.config import TrainerRunSettings
        from inhabit.trainer.trainer import Trainer
        from inhabit.weights.publish import Publisher, PublisherConfig

        _threads(num_cpus)
        self.settings = TrainerRunSettings.model_validate(settings_data)
        self.trainer = Trainer.from_pretrained(model_dir, self.settings.trainer)
        if checkpoint:
            self.trainer.load(checkpoint)
        # Engines run in `dtype`; publishing in it keeps what they load bit-identical to a local run.
        self.publisher = Publisher(store_url, PublisherConfig(dtype=dtype))
        latest = self.publisher.store.latest()
        if latest is None or latest < self.trainer.version:
            self.publisher.publish(self.trainer.state_dict_for_engine(), self.trainer.version)

    def info(self) -> dict[str, Any]:
        return {
            "version": self.trainer.version,
            "data_state": dict(self.trainer.data_state),
            "pid": os.getpid(),
        }

    def step(self, samples: list[Sample]) -> dict[str, Any]:
        metrics = self.trainer.train_step(samples, max_staleness=self.settings.max_staleness)
        self.publisher.publish(self.trainer.state_dict_for_engine(), self.trainer.version)
        return metrics.as_dict()

    def set_data_state(self, state: dict[str, Any]) -> None:
        self.trainer.data_state = state

    def save(self, path: str) -> str:
        return str(self.trainer.save(path))
