"""`RayTrainer`: the pipeline's `TrainerHandle` over a `TrainerActor`.

Samples go to the actor as ordinary Ray arguments (data, once per step); new weights do not come
back: the actor publishes each version to the weight store, and `state_dict_for_engine` is empty.
If the actor dies, every call raises `TrainerLost`; the run (`inhabit.orchestrator.run`) catches it
and resumes from the newest checkpoint with a fresh trainer actor (`RayPlacement.setup` again).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inhabit.contracts import TrainerHandle, TrainerLost

if TYPE_CHECKING:
    from inhabit.trainer.samples import Sample


class RayTrainer(TrainerHandle):
    """A `TrainerActor` behind the pipeline's trainer interface (see module docstring)."""

    def __init__(self, handle: Any, info: dict[str, Any]) -> None:
        self.handle = handle
        self.version = int(info["version"])
        self.data_state = dict(info.get("data_state", {}))
        self.steps = int(self.data_state.get("pipeline_steps", 0))
        self.published = self.version

    def _get(self, ref: Any) -> Any:
        import ray

        try:
            return ray.get(ref)
        except ray.exceptions.RayActorError as e:
            raise TrainerLost(f"the trainer actor died: {type(e).__name__}") from e

    async def step(self, samples: Sequence[Sample]) -> dict[str, Any]:  # type: ignore[override]
        import ray

        try:
            metrics = await self.handle.step.remote(list(samples))
        except ray.exceptions.RayActorError as e:
            raise TrainerLost(f"the trainer actor died during a step: {type(e).__name__}") from e
        self.version = int(metrics["version"])
        self.steps += 1
        return metrics

    def state_dict_for_engine(self) -> dict[str, Any]:
        return {}  # already in the weight store (the actor published it)

    def set_data_state(self, state: dict[str, Any]) -> None:
        self._get(self.handle.set_data_state.remote({**state, "pipeline_steps": self.steps}))

    def save(self, path: Path) -> Path:
        return Path(self._get(self.handle.save.remote(str(path))))

    async def close(self) -> None:
        import ray

        ray.kill(self.handle, no_restart=True)
