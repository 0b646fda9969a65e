"""Wire types shared by several parts: the trajectory record (docs/architecture.md, "Trajectory record").

One `Trajectory` per rollout, one JSON object each (`to_json` / `from_json` round-trip exactly).
The harness writes it, grading fills reward, parts and flags, the orchestrator and trainer read it,
and `inhabit agent` saves it under the user's cache (`harness.agent.sessions_dir`) for online training.

Each context `Segment` (the span between two self-summaries) is its own training sample: it holds
the messages of that context and the model turns generated in it, with the token ids, logprobs,
routed experts and policy versions the policy reported (None where it could not know them). All
segments of a trajectory share its reward.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Status = Literal[
    "finished",  # the model called finish
    "turn_limit",  # max_turns reached
    "token_budget",  # max_total_tokens reached
    "context_overflow",  # the context could not be brought under the budget (or max_summaries hit)
    "policy_error",  # the policy failed (endpoint down after retries, engine error)
    "sandbox_error",  # the sandbox could not be created or died
    "grading_error",  # the episode ran but could not be graded
    "error",  # anything else; `error` says what
]

TRAINABLE_STATUSES: tuple[Status, ...] = ("finished", "turn_limit")
"""Statuses of an episode that ran to its end (finish called, or out of turns): the only ones a
trainer learns from. Every other status is a failure of some part and is left out of training."""


class _Wire(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class MessageRecord(_Wire):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: list[dict[str, Any]] | None = Field(
        None, description="Native tool format: the assistant's calls as OpenAI `tool_calls` entries."
    )
    tool_call_id: str | None = Field(None, description="Native tool format: the call a tool message answers.")
    name: str | None = Field(None, description="Native tool format: the tool a tool message comes from.")


class TurnRecord(_Wire):
    """One generation by the policy: an action turn or a summary."""

    kind: Literal["action", "summary"] = "action"
    text: str
    finish_reason: str = "stop"
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    routed_experts: list[list[list[int]]] | None = Field(
        None, description="Per completion token, per MoE layer, the expert ids the router chose."
    )
    prompt_routed_experts: list[list[list[int]]] | None = Field(
        None, description="Per prompt position 0..P-2, per MoE layer, the expert ids chosen at generation."
    )
    versions: list[int] | None = Field(
        None, description="Policy version that generated each completion token."
    )
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    duration_s: float = 0.0
    reasoning: str | None = Field(
        None,
        description="The turn's reasoning (a <think> block, or the endpoint's), kept out of tool parsing.",
    )


class Segment(_Wire):
    """One context window's worth of the episode, ended by a summary or by the episode's end."""

    index: int
    messages: list[MessageRecord]
    """Every message of this context, the last assistant turn (or summary) included."""
    turns: list[TurnRecord]
    summary: str | None = None
    """The summary that closed this segment and opened the next one (None for the last segment)."""


class ToolCallRecord(_Wire):
    segment: int
    turn: int
    """Index of the action turn in the episode (0-based, across segments)."""
    index: int
    """Position of the call in its turn, in written order."""
    tool: str | None
    """None when the call could not even be parsed to a name."""
    args: dict[str, Any] = Field(default_factory=dict)
    observation: str
    error: bool = False
    truncated: bool = False
    duration_s: float = 0.0


class Trajectory(_Wire):
    task_id: str
    instruction: str
    status: Status
    error: str | None = None
    segments: list[Segment] = Field(default_factory=list)
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    summaries: list[str] = Field(default_factory=list)
    final_message: str | None = None
    """The finish call's message, if the model finished."""
    reward: float | None = None
    reward_parts: dict[str, float] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    grading: dict[str, Any] = Field(default_factory=dict)
    """Grading's status, per-test outcomes and details (free-form, JSON-able)."""
    timings: dict[str, float] = Field(default_factory=dict)
    policy: str = ""
    tool_format: Literal["xml", "native"] = "xml"
    """How the episode spoke to the model: the harness's XML-like text, or the model's own tool
    format through its chat template (harness `tool_format`)."""
    metadata: dict[str, Any] = Field(default_factory=dict)

    @property
    def num_turns(self) -> int:
        return sum(1 for s in self.segments for t in s.turns if t.kind == "action")

    def to_json(self, **kwargs: Any) -> str:
        return self.model_dump_json(**kwargs)

    @classmethod
    def from_json(cls, text: str | bytes) -> Trajectory:
        return cls.model_validate_json(text)
