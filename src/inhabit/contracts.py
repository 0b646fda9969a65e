"""The seams between inhabit's parts: the interfaces one part implements and another calls.

It sits above the parts it names (sandbox, tasks) and below every part that implements or calls
its interfaces (harness and up: docs/architecture.md, "Layers"). At run time it imports only
`inhabit.types` and `inhabit.errors`; the engine and the trajectory file, which live above it,
appear as the Protocols `Engine` and `TrajectorySink`, so it never closes an import cycle.

The policy (harness <-> inference):

    Policy, Message, PolicyTurn   what produces the agent's next turn: `ReplayPolicy` (harness),
                                  `OpenAIPolicy` and `LocalPolicy` (inference)

The run (orchestrator <-> placement): the orchestrator drives a run through these, and a
`Placement` (`inhabit.placement`: on this machine, or as Ray actors) builds them:

    Placement, RunParts   `setup()` starts the parts of one run attempt and hands them over
    TrainerHandle         the trainer, wherever it runs (a thread, a child process, a Ray actor)
    TrainSample           what a handle's `step` carries (`inhabit.trainer.samples.Sample`)
    WeightSync            how a new policy version travels from the trainer to the engine(s)
    RolloutRunner         runs the G rollouts of a task and returns them as a `Group`
    Engine                what the run asks of its inference engine(s) (the full interface:
                          `inhabit.inference.engine.InferenceEngine`)
    TrajectorySink        where the runner appends every trajectory record (`TrajectoryLog`)
    TrainerLost           a trainer that died; the run resumes from its newest checkpoint
"""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

from inhabit.errors import OrchestratorError
from inhabit.types import Trajectory

if TYPE_CHECKING:
    import torch

    from inhabit.sandbox.base import SandboxProvider
    from inhabit.tasks.task import Task


# ---------------------------------------------------------------------------------------- policy
@dataclass(frozen=True)
class Message:
    """One chat message as the harness renders it.

    In the native tool format (harness `tool_format`), an assistant message may carry the calls it
    made as OpenAI `tool_calls` entries (`{"id", "type": "function", "function": {"name",
    "arguments": JSON text}}`), and each observation is a `tool` message naming the call it answers
    (`tool_call_id`) and its tool (`name`). In the XML format those fields stay None.
    """

    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: tuple[dict[str, Any], ...] | None = None
    tool_call_id: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class PolicyTurn:
    """The policy's answer for one turn, plus the token-level facts RL needs."""

    text: str
    finish_reason: str = "stop"
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    routed_experts: list[list[list[int]]] | None = None
    """MoE only: [completion token][layer][k] expert ids of the forward that produced each token."""
    prompt_routed_experts: list[list[list[int]]] | None = None
    """MoE only: [prompt position][layer][k] for prompt positions 0..P-2 (vLLM's layout), so a trainer
    can replay the prompt's routing too."""
    versions: list[int] | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    tool_calls: list[dict[str, Any]] | None = None
    """Native tool format only: the calls the turn made, as OpenAI `tool_calls` entries, in
    written order ([] when it made none the policy could read; None in the XML format)."""
    content: str | None = None
    """Native tool format only: the text outside the calls (`text` stays everything generated)."""
    reasoning: str | None = None
    """The model's reasoning when the policy separates it (an endpoint's `reasoning_content`);
    never parsed for tool calls."""


class Policy(abc.ABC):
    """Produces the next assistant turn for a conversation.

    The harness only sees text in and a `PolicyTurn` out; token ids, logprobs, routed experts and
    versions ride along (None where a policy cannot know them), so the very same loop produces
    training data in RL and plain answers in `inhabit agent`.
    """

    context_window: int = 8192
    """Tokens the policy can attend to; the harness summarizes before a turn would exceed it."""

    @abc.abstractmethod
    async def next_turn(
        self, messages: Sequence[Message], *, max_tokens: int, stop: Sequence[str] = ()
    ) -> PolicyTurn:
        """Return the next assistant turn for `messages`.

        A policy that takes the native tool format also accepts `tools=` (OpenAI function tools,
        a list of dicts): it then describes them to the model and returns `PolicyTurn.tool_calls`.
        The harness passes `tools` only in that format, so an XML-only policy need not accept it.
        """

    def native_tools(self) -> bool | None:
        """Whether this policy can take `tools` in the model's own format: True (its chat template
        renders them), False (it cannot), None (it cannot tell, e.g. a remote endpoint). The
        harness's `tool_format = "auto"` goes native only on True."""
        return False

    @abc.abstractmethod
    def count_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens `messages` occupy once rendered (exact where the tokenizer is known)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Free connections or engines the policy holds."""


# ---------------------------------------------------------------------------------------- groups
def trajectory_min_version(traj: Trajectory) -> int:
    """Oldest policy version among the trajectory's generated tokens (-1 when none is known)."""
    found = [v for seg in traj.segments for turn in seg.turns for v in (turn.versions or ())]
    return min(found) if found else -1


@dataclass
class Group:
    """The rollouts of one task, as a `RolloutRunner` completes them."""

    task_id: str
    index: int
    """Sequence number of the group in the run (order of starting)."""
    trajectories: list[Trajectory]
    start_version: int
    """Engine version when the group started."""
    task: Task | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def min_version(self) -> int:
        """Oldest version of any generated token; a group with none known counts as `start_version`."""
        vs = [v for t in self.trajectories if (v := trajectory_min_version(t)) >= 0]
        return min(vs) if vs else self.start_version


class Engine(Protocol):
    """The inference engine as the run sees it across the seam: its version, weight swaps, decode
    counts, close. Every `inhabit.inference.engine.InferenceEngine` is one."""

    @property
    def version(self) -> int:
        """Policy version of the weights loaded now."""
        ...

    async def load_weights(self, weights: Mapping[str, torch.Tensor] | str | Path, version: int) -> None:
        """Swap in new weights (a state dict or a model folder) between decoding steps."""
        ...

    def decode_counts(self) -> tuple[int, int] | None:
        """(decode steps, sequences decoded over them) so far; None where the engine does not count."""
        ...

    async def close(self) -> None: ...


class TrajectorySink(Protocol):
    """Where a runner appends each trajectory record as it ends (`inhabit.rollouts.TrajectoryLog`)."""

    def write(self, traj: Trajectory) -> None: ...


class RolloutRunner(Protocol):
    """Runs rollouts against the run's engine(s) and sandboxes; a failed rollout is data, never an
    exception out of `run_group`."""

    engine: Engine
    completion_tokens: int
    """Tokens generated by every recorded rollout so far."""
    finished: int
    """Rollouts recorded so far."""

    async def run_group(
        self, task: Task, index: int, *, purpose: str = "train", size: int | None = None
    ) -> Group:
        """`size` (default: the configured G) rollouts of `task`; `purpose` "train" or "eval:<label>"."""
        ...

    async def close(self) -> None:
        """Release what the rollouts hold beyond the engine and sandboxes (the judges' clients);
        the placement calls it when the attempt ends."""
        ...


# ---------------------------------------------------------------------------------------- trainer
class TrainerLost(OrchestratorError):
    """The trainer died; the run can resume from its newest checkpoint."""


class TrainSample(Protocol):
    """One training sequence as it crosses to a trainer handle (`inhabit.trainer.samples.Sample`,
    built by the orchestrator; the part that defines it sits above this module). Per token, all
    aligned with `input_ids`; a handle passes samples on to its trainer untouched."""

    @property
    def input_ids(self) -> torch.Tensor: ...
    @property
    def loss_mask(self) -> torch.Tensor: ...
    @property
    def behaviour_logprobs(self) -> torch.Tensor: ...
    @property
    def versions(self) -> torch.Tensor: ...
    @property
    def routed_experts(self) -> torch.Tensor | None: ...
    @property
    def advantage(self) -> float: ...


class TrainerHandle(abc.ABC):
    """The pipeline's view of the trainer, wherever it runs.

    Pipeline steps that skip the update (no sample with a non-zero advantage) still count as
    steps; the count travels in the checkpoint's data state, so `--resume` continues at the right
    step. Any call may raise `TrainerLost` when the trainer lives elsewhere and died.
    """

    version: int
    steps: int

    @abc.abstractmethod
    async def step(self, samples: Sequence[TrainSample]) -> dict[str, Any]:
        """One policy update; returns the trainer's step metrics as a dict."""

    async def skip(self) -> None:
        """A pipeline step without an update."""
        self.steps += 1

    @abc.abstractmethod
    def state_dict_for_engine(self) -> dict[str, Any]:
        """The new weights for `WeightSync.publish` (empty when the trainer published them itself)."""

    @abc.abstractmethod
    def set_data_state(self, state: dict[str, Any]) -> None:
        """What the run needs to resume (task cursor, groups started), saved with the checkpoint."""

    @abc.abstractmethod
    def save(self, path: Path) -> Path: ...

    async def close(self) -> None:  # noqa: B027 - optional
        """Free what the handle holds."""


class WeightSync(abc.ABC):
    """Publish on the trainer side, apply on the engine side.

    `apply(engine)` loads the newest published version into the engine if it is newer than what
    the engine holds (the engine swaps between decoding steps).
    """

    @abc.abstractmethod
    async def publish(self, state_dict: Mapping[str, torch.Tensor], version: int) -> None:
        """Make `version` available to subscribers."""

    @abc.abstractmethod
    async def apply(self, engine: Engine) -> int:
        """Load the newest published version into `engine` if newer; return the engine's version."""


# ---------------------------------------------------------------------------------------- placement
@dataclass
class RunParts:
    """The parts of one run attempt, started by `Placement.setup`."""

    trainer: TrainerHandle
    data_state: dict[str, Any]
    """The trainer's checkpointed data state (task cursor, groups started); empty on a fresh start."""
    engine: Engine
    """What rollouts generate with: one embedded engine, or a pool over engine actors."""
    runner: RolloutRunner
    """Runs rollouts on `engine` in the placement's sandboxes: the run's provider on this machine,
    or env servers (Ray actors) each with a provider of its own."""
    sync: WeightSync

    async def close(self) -> None:
        """Stop the attempt's parts, every placement the same way: the rollouts first (none is
        left asking a closed engine), then the engine(s), then the trainer. What the placement
        keeps beside them (pinned CPUs, actor fleets) its `end_attempt` releases after this."""
        await self.runner.close()
        await self.engine.close()
        await self.trainer.close()


class Placement(Protocol):
    """Where the parts of a run live; `inhabit.orchestrator.run.train` drives every kind the same way:

    placement.start()
    loop:  parts = await placement.setup(...)    # one attempt: RunParts
           ... evaluate, pipeline, checkpoints ...
           await placement.end_attempt(parts)    # also after TrainerLost, then set up again
    placement.shutdown()
    """

    max_trainer_restarts: int
    """How often a run may resume after `TrainerLost` (0: a lost trainer ends the run)."""

    def start(self) -> None:
        """Join the cluster, if any (before the run prepares its tasks)."""

    async def setup(
        self, model_dir: Path, checkpoint: Path | None, provider: SandboxProvider, log_file: TrajectorySink
    ) -> RunParts:
        """Start trainer, engine(s), sandboxes and weight sync from `checkpoint` (None: the starting
        model at `model_dir`). `provider`: the sandboxes of this machine (what the run prepared its
        tasks with); the runner appends every rollout to `log_file`."""
        ...

    def metrics(self, parts: RunParts) -> dict[str, Any] | None:
        """What to add to each step record as "dispatch" (None: nothing)."""

    async def end_attempt(self, parts: RunParts) -> None:
        """Stop what `setup` started for this attempt (after success, failure or `TrainerLost`)."""

    def shutdown(self) -> None:
        """Leave the cluster and stop what lives for the whole run."""
