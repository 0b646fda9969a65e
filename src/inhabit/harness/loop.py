"""The agent loop: render, ask the policy, run the calls, append observations, summarize, repeat.

One episode = one task in one sandbox. The context is [system prompt, task, (assistant turn,
observations)*]. Before every turn the loop counts the context's tokens with the policy's own
counter; when the next turn could push it past the budget (`context_budget`, default the policy's
window) the loop asks the policy to summarize with `prompts.SUMMARY_PROMPT`, closes the current
segment (summary request and answer included: the summary is a trained generation too), and
restarts the context as [system prompt, task + summary].

The episode ends on finish, `max_turns`, `max_total_tokens`, or a context that cannot be
compacted. Whatever goes wrong (a policy that fails, a sandbox that dies) ends the episode with a
status and an error on the trajectory: a failed rollout is data, not an exception. The one
exception is `PolicyUnreachable` (no server at the URL, an unknown model, a refused key): no
rollout could succeed, so it ends the caller's command instead of becoming data. The loop knows
nothing of training or of `inhabit agent`; `observer` lets a caller watch turns as they happen.

Tool format (`HarnessConfig.tool_format`): in `xml` the system prompt describes the tools and their
`<tool>` text format and observations return as one user message per turn; in `native` the tools go
to the policy as OpenAI function tools (`prompts.tool_schemas`), the policy returns the calls it
read (`PolicyTurn.tool_calls`), and each call's observation returns as its own `tool` message, in
call order. `auto` asks the policy (`Policy.native_tools`). The trajectory records which was used.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from inhabit.contracts import Message, Policy, PolicyTurn
from inhabit.errors import HarnessError, PolicyUnreachable, SandboxError
from inhabit.harness.config import HarnessConfig
from inhabit.harness.execute import execute_calls, execute_native_calls
from inhabit.harness.prompts import (
    NATIVE_NO_CALL_TEXT,
    NATIVE_SYSTEM,
    SUMMARY_PROMPT,
    render_native_observation,
    render_observations,
    system_prompt,
    task_prompt,
    tool_schemas,
)
from inhabit.harness.tools import ToolContext
from inhabit.log import get_logger
from inhabit.sandbox.base import Sandbox
from inhabit.types import MessageRecord, Segment, Status, ToolCallRecord, Trajectory, TurnRecord

log = get_logger(__name__)


class EpisodeObserver:
    """Hooks called as the episode runs (no-ops by default); `inhabit agent` streams through them."""

    def on_turn(self, turn: int, text: str) -> None: ...

    def on_call(self, record: ToolCallRecord) -> None: ...

    def on_summary(self, summary: str) -> None: ...


class _PolicyFailed(Exception):
    pass


class ToolFormatError(HarnessError):
    """`tool_format = "native"` with a policy that cannot take tools in the model's own format."""


def resolve_tool_format(requested: str, policy: Policy) -> str:
    """ "xml" or "native" for `requested` ("auto", "xml", "native") with this policy."""
    support = policy.native_tools()
    if requested == "native" and support is False:
        raise ToolFormatError(
            f"tool_format is native, but {type(policy).__name__} cannot give the model tools in its own "
            "format (its chat template renders no `tools`, or names no tool-call format inhabit "
            'reads); set harness.tool_format = "xml" (or "auto")'
        )
    if requested == "auto":
        return "native" if support is True else "xml"
    return requested


def split_reasoning(turn: PolicyTurn) -> tuple[str | None, str]:
    """(the turn's reasoning, the text to parse for tool calls). A policy that separates reasoning
    says so in `turn.reasoning`; otherwise a `<think>` block closed by `</think>` (Qwen3, DeepSeek
    R1; the opening tag may sit in the prompt) is the reasoning, so a call written while thinking
    is never run."""
    if turn.reasoning is not None:
        return turn.reasoning, turn.text
    head, sep, tail = turn.text.partition("</think>")
    if not sep:
        return None, turn.text
    head = head.strip()
    return head.removeprefix("<think>").strip() or None, tail


def _turn_record(turn: PolicyTurn, kind: str, duration_s: float) -> TurnRecord:
    return TurnRecord(
        reasoning=split_reasoning(turn)[0],
        kind=kind,  # type: ignore[arg-type]
        text=turn.text,
        finish_reason=turn.finish_reason,
        prompt_token_ids=turn.prompt_token_ids,
        completion_token_ids=turn.completion_token_ids,
        logprobs=turn.logprobs,
        routed_experts=turn.routed_experts,
        prompt_routed_experts=turn.prompt_routed_experts,
        versions=turn.versions,
        prompt_tokens=turn.prompt_tokens,
        completion_tokens=turn.completion_tokens,
        duration_s=round(duration_s, 6),
    )


def _records(messages: Sequence[Message]) -> list[MessageRecord]:
    return [
        MessageRecord(
            role=m.role,
            content=m.content,
            tool_calls=list(m.tool_calls) if m.tool_calls else None,
            tool_call_id=m.tool_call_id,
            name=m.name,
        )
        for m in messages
    ]


class _Episode:
    def __init__(self, policy: Policy, ctx: ToolContext, instruction: str, observer: EpisodeObserver) -> None:
        self.policy = policy
        self.ctx = ctx
        self.cfg = ctx.config
        self.instruction = instruction
        self.observer = observer
        self.tool_format = resolve_tool_format(self.cfg.tool_format, policy)
        self.native = self.tool_format == "native"
        self.tools = tool_schemas() if self.native else None
        self.system = NATIVE_SYSTEM if self.native else system_prompt()
        self.window = policy.context_window
        self.budget = min(self.cfg.context_budget or self.window, self.window)
        self.messages = self._fresh(None)
        self.segments: list[Segment] = []
        self.turns: list[TurnRecord] = []
        self.calls: list[ToolCallRecord] = []
        self.summaries: list[str] = []
        self.generated = 0
        self.action_turns = 0
        self.final_message: str | None = None
        self.policy_s = 0.0
        self.tools_s = 0.0

    def _fresh(self, summary: str | None) -> list[Message]:
        return [Message("system", self.system), Message("user", task_prompt(self.instruction, summary))]

    async def _generate(self, messages: Sequence[Message], max_tokens: int, kind: str) -> PolicyTurn:
        t0 = time.monotonic()
        kw = {"tools": self.tools} if self.native else {}
        try:
            turn = await self.policy.next_turn(messages, max_tokens=max_tokens, **kw)
        except PolicyUnreachable:
            raise
        except Exception as e:
            raise _PolicyFailed(f"{type(e).__name__}: {e}") from e
        finally:
            self.policy_s += time.monotonic() - t0
        self.turns.append(_turn_record(turn, kind, time.monotonic() - t0))
        self.generated += turn.completion_tokens or self.policy.count_tokens(
            [Message("assistant", turn.text)]
        )
        return turn

    async def run(self) -> tuple[Status, str | None]:
        cfg = self.cfg
        while True:
            if self.action_turns >= cfg.max_turns:
                return "turn_limit", None
            if self.generated >= cfg.max_total_tokens:
                return "token_budget", None
            used = self._count(self.messages)
            if used + cfg.max_turn_tokens > self.budget:
                if not any(t.kind == "action" for t in self.turns):
                    return "context_overflow", (
                        f"the fresh context (system prompt, task and summary: {used} tokens) plus one turn "
                        f"({cfg.max_turn_tokens}) does not fit the budget of {self.budget} tokens"
                    )
                if len(self.summaries) >= cfg.max_summaries:
                    return "context_overflow", f"max_summaries ({cfg.max_summaries}) reached"
                await self._summarize()
                continue
            room = min(cfg.max_turn_tokens, self.window - used, cfg.max_total_tokens - self.generated)
            turn = await self._generate(self.messages, max(room, 1), "action")
            self.observer.on_turn(self.action_turns, turn.text)
            t0 = time.monotonic()
            if self.native:
                calls = list(turn.tool_calls or [])
                content = turn.content if turn.content is not None else turn.text
                self.messages.append(Message("assistant", content, tool_calls=tuple(calls) or None))
                outcome = await execute_native_calls(
                    calls, self.ctx, segment=len(self.segments), turn=self.action_turns
                )
            else:
                self.messages.append(Message("assistant", turn.text))
                outcome = await execute_calls(
                    split_reasoning(turn)[1], self.ctx, segment=len(self.segments), turn=self.action_turns
                )
            self.tools_s += time.monotonic() - t0
            self.action_turns += 1
            for record in outcome.records:
                self.calls.append(record)
                self.observer.on_call(record)
            if outcome.finish_message is not None:
                self.final_message = outcome.finish_message
                return "finished", None
            if self.native:
                self._native_observations(calls, outcome.records)
                continue
            self.messages.append(Message("user", render_observations(outcome.records)))

    def _native_observations(self, calls: list[dict], records: list[ToolCallRecord]) -> None:
        """One `tool` message per call, in call order (a turn without calls gets a user nudge)."""
        if not records:
            self.messages.append(Message("user", NATIVE_NO_CALL_TEXT))
        for call, r in zip(calls, records, strict=True):
            text = render_native_observation(r.observation, r.error)
            self.messages.append(Message("tool", text, tool_call_id=call.get("id"), name=r.tool))

    def _count(self, messages: Sequence[Message]) -> int:
        if self.native:
            return self.policy.count_tokens(messages, tools=self.tools)  # type: ignore[call-arg]
        return self.policy.count_tokens(messages)

    async def _summarize(self) -> None:
        request = [*self.messages, Message("user", SUMMARY_PROMPT)]
        # The summary must fit the window itself: drop the oldest turns (each with its observations:
        # everything up to the next assistant message) if not.
        room = self.window - self.cfg.summary_max_tokens
        while self._count(request) > room and len(request) > 4:
            end = next(
                (i for i in range(3, len(request)) if request[i].role == "assistant"), len(request) - 1
            )
            del request[2:end]
        max_tokens = max(16, min(self.cfg.summary_max_tokens, self.window - self._count(request)))
        turn = await self._generate(request, max_tokens, "summary")
        summary = turn.text.strip() or "(the summary was empty)"
        self.segments.append(
            Segment(
                index=len(self.segments),
                messages=_records([*request, Message("assistant", turn.text)]),
                turns=self.turns,
                summary=summary,
            )
        )
        self.summaries.append(summary)
        self.observer.on_summary(summary)
        self.turns = []
        self.messages = self._fresh(summary)

    def close_segment(self) -> None:
        if self.turns or not self.segments:
            self.segments.append(
                Segment(index=len(self.segments), messages=_records(self.messages), turns=self.turns)
            )
            self.turns = []


async def run_episode(
    policy: Policy,
    sandbox: Sandbox,
    instruction: str,
    *,
    config: HarnessConfig | None = None,
    task_id: str = "",
    test_command: str | None = None,
    observer: EpisodeObserver | None = None,
) -> Trajectory:
    """Run one episode to its end and return its trajectory (reward unset: grading is separate)."""
    cfg = config or HarnessConfig()
    ctx = ToolContext(sandbox=sandbox, config=cfg, test_command=test_command or cfg.test_command)
    episode = _Episode(policy, ctx, instruction, observer or EpisodeObserver())
    t0 = time.monotonic()
    error: str | None
    try:
        status, error = await episode.run()
    except PolicyUnreachable:
        raise
    except _PolicyFailed as e:
        status, error = "policy_error", str(e)
    except SandboxError as e:
        status, error = "sandbox_error", f"{type(e).__name__}: {e}"
    except Exception as e:
        log.exception("episode failed")
        status, error = "error", f"{type(e).__name__}: {e}"
    episode.close_segment()
    return Trajectory(
        task_id=task_id,
        instruction=instruction,
        status=status,
        error=error,
        segments=episode.segments,
        tool_calls=episode.calls,
        summaries=episode.summaries,
        final_message=episode.final_message,
        timings={
            "episode_s": round(time.monotonic() - t0, 6),
            "policy_s": round(episode.policy_s, 6),
            "tools_s": round(episode.tools_s, 6),
        },
        policy=type(policy).__name__,
        tool_format=episode.tool_format,  # type: ignore[arg-type]
    )
