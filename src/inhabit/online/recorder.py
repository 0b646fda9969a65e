"""Sessions of `inhabit serve` clients: a chat completion sent with an `X-Inhabit-Session: ID`
header is appended to session ID in the store, turn by turn (`inhabit serve --sessions DB`).

Each recorded turn holds what the engine knows and a trainer needs: the prompt and completion token
ids, the engine's logprobs, the policy version of every token, routed experts for MoE models. The
messages are recorded as the client sent them (redacted, like everything the store writes).
A constrained turn (a grammar masked the tokens drawn: `response_format`, a forced tool call) is
recorded with `"constrained": true` and, unless the recorder keeps them, without its token data,
so training leaves it out (its tokens were not drawn from the model's distribution).
Streamed completions are not recorded (their tokens are emitted as they are decoded); a client that
wants its sessions learned from sends non-streaming requests. Signals come from `inhabit online feedback
ID good|bad` or from `POST /v1/sessions/ID/signals` on the same server.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from inhabit.log import get_logger
from inhabit.online.store import SessionStore

log = get_logger(__name__)

SESSION_HEADER = "x-inhabit-session"
_ID = re.compile(r"^[A-Za-z0-9_.:\-]{1,128}$")
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


def valid_session_id(value: str) -> bool:
    return bool(_ID.match(value))


class ServeRecorder:
    """Appends served turns to a session store (writes run in a thread: SQLite may wait on a lock)."""

    def __init__(self, path: str | Path, *, model: str | None = None, keep_constrained: bool = False) -> None:
        self.store = SessionStore(path)
        self.model = model
        self.keep_constrained = keep_constrained
        self.failures = 0

    async def record(
        self, session_id: str, messages: list[dict[str, Any]], completion: Any, *, constrained: bool = False
    ) -> None:
        if not valid_session_id(session_id):
            log.warning(
                "X-Inhabit-Session %r is not an id (letters, digits, _ . : -); not recorded", session_id[:40]
            )
            return
        turn = {
            "kind": "action",
            "text": completion.text,
            "finish_reason": completion.finish_reason,
            "prompt_token_ids": completion.prompt_token_ids,
            "completion_token_ids": list(completion.token_ids),
            "logprobs": list(completion.logprobs),
            "routed_experts": completion.routed_experts,
            "prompt_routed_experts": completion.prompt_routed_experts,
            "versions": list(completion.versions),
            "prompt_tokens": len(completion.prompt_token_ids or []),
            "completion_tokens": len(completion.token_ids),
        }
        if constrained:
            turn["constrained"] = True
            if not self.keep_constrained:
                for key in ("prompt_token_ids", "completion_token_ids", "logprobs", "routed_experts"):
                    turn[key] = None
                turn["prompt_routed_experts"] = None
        msgs = [{k: m[k] for k in _MESSAGE_KEYS if m.get(k) is not None} for m in messages]
        for m in msgs:
            if not isinstance(m.get("content"), str):
                m["content"] = "" if m.get("content") is None else str(m["content"])
        try:
            await asyncio.to_thread(self.store.append_turn, session_id, turn, msgs, model=self.model)
        except Exception as e:  # recording must never fail the request it follows
            self.failures += 1
            log.warning("could not record turn of session %s: %s: %s", session_id, type(e).__name__, e)

    async def signal(self, session_id: str, kind: str, value: float, note: str | None) -> None:
        await asyncio.to_thread(self.store.add_signal, session_id, kind, value, note=note, source="client")

    def install_routes(self, app: Any, *, auth: Any, api_error: type[Exception]) -> None:
        """`POST /v1/sessions/{id}/signals` on the serving app (server_routes.py)."""
        from inhabit.online.server_routes import install_session_routes

        install_session_routes(app, self, auth=auth, api_error=api_error)

    def close(self) -> None:
        self.store.close()
