"""The engines of a run on this machine: `[engine] backend = ...`, one of `ENGINE_BACKENDS`.

    [engine]
    backend = "vllm"     # embedded (default): inhabit's own engine in this process
    replicas = 2         # local backends: this many engines; a rollout goes to the least busy
    urls = []            # remote: OpenAI-compatible servers that return inhabit's RL fields

`ENGINE_BACKENDS` is the one list of engine backends: each name maps to an `EngineBackend` in a
module of its own (`engine_embedded.py`, `engine_vllm.py`, `engine_remote.py`). Config validation,
`check_backend`, `start_engines` and `describe_engines` (the dry run's plan) all go through it,
so a new backend is one new module plus its `register` line below.

`start_engines` turns the table into one `InferenceEngine`. A single embedded engine is returned
as it is (the quickstart's path does not change). Anything else is a `ReplicaSet`:

- Placement per rollout: `lease()` picks the replica with the fewest rollouts in flight and the
  whole episode stays on it (its turns share a prefix cache there).
- Weights: `load_weights` loads every replica (concurrently) and remembers the newest weights, so
  that a replica started again later comes up on them, at the same policy version.
- Faults: a vLLM replica whose process died is started again on the newest weights (at most
  `max_restarts` times per replica). The lease of every rollout that was on it reports `lost`,
  and `EngineRunner` runs those rollouts again from the start: counted in `reruns`, recorded and
  trained once. A remote server cannot be restarted from here: its failed turns are data, as
  for any engine error.

vLLM runs as a subprocess from its own virtualenv (`inhabit.inference.vllm_backend`): on this CPU
`scripts/setup-vllm.sh` makes `.venv-vllm`; on GPUs point `engine.vllm.venv` (or `command`) at
the user's install.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field, model_validator

from inhabit.config import Config
from inhabit.inference.config import EngineConfig, ServerFlavor
from inhabit.inference.engine import Completion, GenerationRequest, InferenceEngine
from inhabit.log import get_logger
from inhabit.registry import Registry

log = get_logger(__name__)


class EngineBackend(Protocol):
    """What one engine backend provides (registered in `ENGINE_BACKENDS` by name)."""

    def problem(self, cfg: RunEngineConfig) -> str | None:
        """What is wrong with `cfg` for this backend (checked when the config is validated), or None."""

    def check(self, cfg: RunEngineConfig) -> None:
        """Fail early, in one line (ConfigError), when this backend cannot start on this machine."""

    def describe(self, cfg: RunEngineConfig) -> str:
        """The engines `cfg` would start, in one line (`inhabit train --dry-run`)."""

    async def start(
        self, cfg: RunEngineConfig, model_dir: Path, *, version: int, log_dir: Path
    ) -> InferenceEngine:
        """The run's engine(s) on the weights in `model_dir`: one engine or a `ReplicaSet`."""


ENGINE_BACKENDS: Registry[EngineBackend] = Registry("engine backend")
ENGINE_BACKENDS.register(
    "embedded", "inhabit.placement.engine_embedded:BACKEND", "inhabit's own engine in this process"
)
ENGINE_BACKENDS.register("vllm", "inhabit.placement.engine_vllm:BACKEND", "`vllm serve` subprocesses")
ENGINE_BACKENDS.register(
    "remote", "inhabit.placement.engine_remote:BACKEND", "OpenAI-compatible servers at `urls`", local=False
)
EngineBackendName = ENGINE_BACKENDS.name_type()


class VLLMOptions(Config):
    """How a run starts `vllm serve` (the `[engine.vllm]` table)."""

    venv: str | None = Field(
        None, description="vLLM's virtualenv; default $INHABIT_VLLM_VENV, then ./.venv-vllm."
    )
    command: list[str] | None = Field(
        None, description="Full command prefix instead of <venv>/bin/python -m vllm.entrypoints..."
    )
    dtype: str = Field("float32", description="vLLM --dtype (bfloat16 on GPUs).")
    kv_cache_gib: int = Field(1, ge=1, description="VLLM_CPU_KVCACHE_SPACE on CPU.")
    reload: Literal["auto", "inplace", "restart"] = Field(
        "auto", description="Weight updates: auto = in place, or a restart for models with a tied LM head."
    )
    routed_experts: bool = Field(False, description="--enable-return-routed-experts (GPU builds).")
    extra_args: list[str] = Field(
        default_factory=list, description="More vLLM arguments (e.g. --tensor-parallel-size 8)."
    )
    startup_timeout_s: float = Field(900.0, gt=0, description="Wait this long for a server to answer.")
    devices: list[str] = Field(
        default_factory=list,
        description="GPUs of each replica as CUDA_VISIBLE_DEVICES, one entry per replica (e.g. "
        '["4,5", "6,7"] for two tensor-parallel-2 servers beside a trainer on GPUs 0-3); empty: inherited.',
    )


class RunEngineConfig(EngineConfig):
    """`[engine]` of a run: the embedded engine's settings plus which backend and how many."""

    backend: EngineBackendName = Field(
        "embedded", description="One of ENGINE_BACKENDS: " + "; ".join(
            f"{e.name}: {e.description}" for e in ENGINE_BACKENDS.entries()) + "."
    )  # fmt: skip
    replicas: int = Field(1, ge=1, le=256, description="Engines of a local backend (embedded or vllm).")
    urls: list[str] = Field(default_factory=list, description="remote: server roots (no /v1).")
    flavor: ServerFlavor = Field(
        "inhabit", description="remote: which server speaks (`inhabit serve`, vLLM or SGLang)."
    )
    api_key: str | None = Field(None, description="remote: bearer token of the servers.")
    max_restarts: int = Field(3, ge=0, description="vllm: restarts of one replica whose process died.")
    vllm: VLLMOptions = Field(default_factory=VLLMOptions)

    @model_validator(mode="after")
    def _check(self) -> RunEngineConfig:
        if (problem := ENGINE_BACKENDS.load(self.backend).problem(self)) is not None:
            raise ValueError(problem)
        if self.vllm.devices and len(self.vllm.devices) != self.replicas:
            raise ValueError(
                f"engine.vllm.devices has {len(self.vllm.devices)} entries for {self.replicas} replicas: "
                "give one CUDA_VISIBLE_DEVICES value per replica"
            )
        return self

    def embedded(self) -> EngineConfig:
        """The embedded engine's own settings."""
        return EngineConfig(**self.model_dump(include=set(EngineConfig.model_fields)))

    def dtype_for(self, model_dir: str | Path) -> str:
        """`dtype` with `auto` resolved for the model in `model_dir` on this machine: what a cluster
        decides once, so that its publisher and every engine actor agree (inference/precision.py)."""
        from inhabit.inference.precision import choose_dtype, folder_parameters

        return choose_dtype(
            self.dtype,
            device=self.device,
            parameters=folder_parameters(model_dir),
            deterministic=self.deterministic,
        ).name


class Replica:
    """One engine of a `ReplicaSet`, with what placement and restarts need to know."""

    def __init__(self, index: int, engine: InferenceEngine) -> None:
        self.index, self.engine = index, engine
        self.in_flight = 0
        self.leased = 0
        """Rollouts started on this replica so far."""
        self.restarts = 0
        self.generation = 0
        """Bumped at every restart: a lease taken before it is lost."""
        self.lock = asyncio.Lock()

    def dead(self) -> bool:
        """True when the replica's server process has exited (vLLM); never for other engines."""
        server = getattr(self.engine, "server", None)
        proc = getattr(server, "proc", None)
        return proc is not None and proc.poll() is not None


class ReplicaLease(InferenceEngine):
    """One rollout's engine: a replica chosen when the rollout starts (see module docstring)."""

    def __init__(self, owner: ReplicaSet, replica: Replica) -> None:
        self.owner, self.replica = owner, replica
        self.generation = replica.generation
        self.max_model_len = getattr(replica.engine, "max_model_len", None)
        replica.in_flight += 1
        replica.leased += 1
        self._released = False

    @property
    def version(self) -> int:
        return self.replica.engine.version

    @property
    def lost(self) -> bool:
        """The replica died (and was or is being restarted) during this rollout."""
        return self.replica.generation != self.generation or self.replica.dead()

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        outs = await self.replica.engine.generate(requests)
        if any(c.finish_reason == "error" for c in outs) and self.replica.dead():
            await self.owner.revive(self.replica)
        return outs

    async def load_weights(self, weights: Any, version: int) -> None:
        raise NotImplementedError("weights go to the ReplicaSet, not to one rollout's lease")

    def release(self) -> None:
        if not self._released:
            self._released = True
            self.replica.in_flight -= 1


class ReplicaSet(InferenceEngine):
    """Several engines behind one `InferenceEngine` (see module docstring)."""

    def __init__(
        self, engines: Sequence[InferenceEngine], *, restartable: bool = False, max_restarts: int = 0
    ):
        if not engines:
            raise ValueError("a ReplicaSet needs at least one engine")
        self.replicas = [Replica(i, e) for i, e in enumerate(engines)]
        self.restartable = restartable
        self.max_restarts = max_restarts
        self._latest: tuple[Any, int] | None = None
        self.max_model_len = min(
            (m for e in engines if (m := getattr(e, "max_model_len", None)) is not None), default=None
        )

    @property
    def version(self) -> int:
        return min(r.engine.version for r in self.replicas)

    def lease(self) -> ReplicaLease:
        """The engine for one rollout: the live replica with the fewest rollouts in flight."""
        live = [r for r in self.replicas if not r.dead()] or self.replicas
        return ReplicaLease(self, min(live, key=lambda r: (r.in_flight, r.index)))

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        """Requests outside a rollout (evaluation probes, tests): the least busy replica."""
        lease = self.lease()
        try:
            return await lease.generate(requests)
        finally:
            lease.release()

    async def load_weights(self, weights: Mapping[str, Any] | str | Path, version: int) -> None:
        self._latest = (weights, version)
        await asyncio.gather(*(self._load(r, weights, version) for r in self.replicas))

    async def _load(self, replica: Replica, weights: Any, version: int) -> None:
        async with replica.lock:
            if replica.engine.version < version:
                await replica.engine.load_weights(weights, version)

    async def revive(self, replica: Replica) -> None:
        """Start a dead replica again on the newest weights (once, however many rollouts saw it die)."""
        async with replica.lock:
            if not replica.dead():
                return  # another rollout already restarted it
            if not self.restartable or replica.restarts >= self.max_restarts:
                log.error(
                    "engine replica %d died and is not restarted (%d restarts)",
                    replica.index,
                    replica.restarts,
                )
                return
            replica.restarts += 1
            replica.generation += 1
            version = replica.engine.version
            log.warning("engine replica %d died; starting it again at version %d", replica.index, version)
            await replica.engine.restart()
            if self._latest is not None and self._latest[1] > replica.engine.version:
                await replica.engine.load_weights(*self._latest)

    def stats(self) -> dict[str, Any]:
        return {
            "replicas": len(self.replicas),
            "in_flight": [r.in_flight for r in self.replicas],
            "rollouts_per_replica": [r.leased for r in self.replicas],
            "restarts": sum(r.restarts for r in self.replicas),
        }

    async def close(self) -> None:
        await asyncio.gather(*(r.engine.close() for r in self.replicas), return_exceptions=True)


def check_backend(cfg: RunEngineConfig) -> None:
    """Fail early, in one line, when the chosen backend cannot start here."""
    ENGINE_BACKENDS.load(cfg.backend).check(cfg)


def describe_engines(cfg: RunEngineConfig) -> str:
    """The engines `cfg` would start, in one line."""
    return ENGINE_BACKENDS.load(cfg.backend).describe(cfg)


async def start_engines(
    cfg: RunEngineConfig, model_dir: Path, *, version: int, log_dir: Path
) -> InferenceEngine:
    """The run's engine(s) on the weights in `model_dir` (see module docstring)."""
    backend = ENGINE_BACKENDS.load(cfg.backend)
    backend.check(cfg)
    return await backend.start(cfg, model_dir, version=version, log_dir=log_dir)


def urls_unused(cfg: RunEngineConfig) -> str | None:
    """The problem of a backend that serves no `urls` when some are given."""
    if cfg.urls:
        return f"engine.urls is only used with engine.backend = 'remote' (not {cfg.backend!r})"
    return None
