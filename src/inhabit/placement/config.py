"""`PlacementConfig` (the `[placement]` table): where the parts of a run go: on this machine, or as
Ray actors (`RayConfig`, the `[placement.ray]` table).

Every actor asks Ray for CPUs (and GPUs) plus optional custom resources that name machine pools,
so that `ray start --resources '{"rollout": 4}'` on the inference machines, `{"sandbox": 8}` on
the sandbox machines and `{"trainer": 1}` on the training machine put each part where it belongs.
A resource that no node offers leaves its actor pending (Ray's normal behaviour), so the run
waits for capacity rather than placing a part on the wrong machine.

`RunSettings` is the slice of a whole run's settings that a placement reads (the orchestrator's
`RunConfig` is one): a Protocol, since the run's config lives in the part above this one.

`PLACEMENTS` (`placement.backend`) and `LOCAL_TRAINERS` (`placement.trainer`) are the one list of
each: config validation and the factories read them, and a new one is its module plus a line here.

Nothing here imports Ray: the default install has no Ray, and a local run never needs it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, runtime_checkable

from pydantic import Field

from inhabit.config import Config
from inhabit.registry import Registry

if TYPE_CHECKING:
    from collections.abc import Callable

    from inhabit.contracts import Placement
    from inhabit.harness.config import HarnessConfig
    from inhabit.placement.engine_backends import RunEngineConfig
    from inhabit.placement.trainer_local import StartLocalTrainer
    from inhabit.rewards.compose import RewardConfig
    from inhabit.rollouts import RolloutConfig
    from inhabit.sandbox import SandboxConfig
    from inhabit.trainer.config import TrainerConfig


PLACEMENTS: Registry[Callable[[RunSettings], Placement]] = Registry("placement")
PLACEMENTS.register("local", "inhabit.placement.local:LocalPlacement", "everything on this machine")
PLACEMENTS.register(
    "ray",
    "inhabit.placement.cluster:RayPlacement",
    "engines, env servers and the trainer as Ray actors",
    local=False,
)
PlacementName = PLACEMENTS.name_type()

LOCAL_TRAINERS: Registry[StartLocalTrainer] = Registry("local trainer")
LOCAL_TRAINERS.register(
    "thread", "inhabit.placement.trainer_local:start_thread_trainer", "a worker thread of this process"
)
LOCAL_TRAINERS.register(
    "process", "inhabit.placement.trainer_local:start_process_trainer", "a child process on its own cores"
)
LocalTrainerName = LOCAL_TRAINERS.name_type()


class ActorResources(Config):
    """What one actor asks Ray for."""

    num_cpus: float = Field(1.0, ge=0, description="CPUs reserved for the actor.")
    num_gpus: float = Field(0.0, ge=0, description="GPUs reserved for the actor.")
    resources: dict[str, float] = Field(
        default_factory=dict,
        description="Custom resources naming a machine pool, e.g. {rollout = 1} (see `ray start --resources`).",
    )

    def options(self) -> dict:
        """Keyword arguments for `ActorClass.options(...)`."""
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "resources": dict(self.resources)}


class RayConfig(Config):
    """Actors, their resources, and how rollouts are dispatched across them."""

    address: str | None = Field(
        None,
        description="Ray cluster to join ('auto', 'ray://host:10001', 'host:6379'); None: the "
        "RAY_ADDRESS environment variable, else a fresh single-machine Ray.",
    )
    engines: int = Field(2, ge=1, le=4096, description="Inference-engine actors (an EmbeddedEngine each).")
    engine: ActorResources = Field(default_factory=ActorResources)
    env_servers: int = Field(
        1,
        ge=0,
        le=4096,
        description="Environment-server actors (sandboxes over HTTP); 0: sandboxes in the driver.",
    )
    env_server: ActorResources = Field(default_factory=ActorResources)
    trainer: ActorResources = Field(default_factory=ActorResources)
    bind_host: str | None = Field(
        None,
        description="Address env servers bind (None: the node's IP, reachable by the driver on another "
        "machine; '127.0.0.1' when every node is this machine).",
    )
    weights_dir: str | None = Field(
        None,
        description="Weight store (a directory every node sees, or an fsspec URL); None: <run_dir>/weights.",
    )
    oversample: int = Field(
        0,
        ge=0,
        le=1024,
        description="Extra rollouts started per group; the group keeps the first G to finish.",
    )
    deadline_s: float | None = Field(
        None,
        gt=0,
        description="Per-rollout deadline, counted from when the group asked for the rollout (time "
        "queued for a slot, an engine or an env server included): a rollout not done by then is "
        "cancelled and left out of its group (counted in metrics as lost to the deadline).",
    )
    max_attempts: int = Field(
        3, ge=1, le=100, description="Tries of one rollout when the engine or env server it used died."
    )
    max_trainer_restarts: int = Field(
        2, ge=0, le=100, description="Times the run resumes from its last checkpoint after the trainer dies."
    )
    start_timeout_s: float = Field(
        600.0,
        gt=0,
        description="How long to wait for an actor kind to come up (or for any live one) before failing.",
    )
    probe_timeout_s: float = Field(
        5.0, gt=0, description="How long a liveness check of an actor or env server may take."
    )


class PlacementConfig(Config):
    """Where the parts run: on this machine (the trainer in this process or a child of its own), or
    as Ray actors across machines (`backend = "ray"`, see [placement.ray]; `placement = "ray"` for short)."""

    backend: PlacementName = Field(
        "local",
        description="; ".join(f"{e.name}: {e.description}" for e in PLACEMENTS.entries()) + ".",
    )
    ray: RayConfig = Field(default_factory=RayConfig, description="Actors and dispatch when backend = 'ray'.")

    trainer: LocalTrainerName = Field(
        "thread",
        description="With backend local: "
        + "; ".join(f"{e.name}: {e.description}" for e in LOCAL_TRAINERS.entries())
        + ".",
    )
    trainer_cpus: list[int] | None = Field(None, description="CPU ids the trainer process is pinned to.")
    trainer_threads: int = Field(1, ge=1, description="torch threads of the trainer process.")
    rollout_cpus: list[int] | None = Field(
        None, description="CPU ids this process (engine, harness, sandboxes it starts) is pinned to."
    )


class WeightStoreSetting(Protocol):
    """The run's `[weights]` table as a placement reads it."""

    @property
    def store(self) -> str | None:
        """Also publish every version to this weight store (None: in memory only)."""
        ...


@runtime_checkable
class RunSettings(Protocol):
    """What `LocalPlacement` and `RayPlacement` read of a run's settings (`RunConfig` is one)."""

    @property
    def placement(self) -> PlacementConfig: ...
    @property
    def engine(self) -> RunEngineConfig: ...
    @property
    def sandbox(self) -> SandboxConfig: ...
    @property
    def harness(self) -> HarnessConfig: ...
    @property
    def rollout(self) -> RolloutConfig: ...
    @property
    def trainer(self) -> TrainerConfig: ...
    @property
    def reward(self) -> RewardConfig | None: ...
    @property
    def weights(self) -> WeightStoreSetting: ...
    @property
    def run_dir(self) -> str: ...
    @property
    def seed(self) -> int: ...
    @property
    def threads(self) -> int | None: ...
    @property
    def max_staleness(self) -> int: ...
