"""`POST /v1/sessions/{id}/signals` on `inhabit serve --sessions DB`: a client rates its own session.

Body: `{"kind": "rating", "value": 1, "note": "..."}` (kind defaults to rating). An unknown session
answers 404; the same auth as every /v1 route applies.
"""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI
from pydantic import BaseModel, ConfigDict, Field

from inhabit.errors import OnlineError
from inhabit.online.store import UnknownSession


class SignalBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field("rating", max_length=64)
    value: float = 1.0
    note: str | None = Field(None, max_length=4096)


def install_session_routes(app: FastAPI, recorder: Any, *, auth: Any, api_error: type[Exception]) -> None:
    @app.post("/v1/sessions/{session_id}/signals", dependencies=[Depends(auth)])
    async def signal(session_id: str, body: SignalBody) -> dict:
        try:
            await recorder.signal(session_id, body.kind, body.value, body.note)
        except UnknownSession as e:
            raise api_error(404, str(e), code="session_not_found") from None  # type: ignore[call-arg]
        except OnlineError as e:
            raise api_error(400, str(e), param="kind") from None  # type: ignore[call-arg]
        return {"session": session_id, "kind": body.kind, "value": body.value}
