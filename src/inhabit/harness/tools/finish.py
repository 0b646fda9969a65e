"""finish: the model says it is done; the loop ends the episode after the turn's other calls."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from inhabit.harness.tools.base import ArgSpec, Observation, Tool, ToolContext, ToolSpec


class Finish(Tool):
    spec = ToolSpec(
        "finish",
        "End the episode; `message` tells the user what you did (and what is left, if anything).",
        (ArgSpec("message", "text", True, "a short summary of the result"),),
    )

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        return Observation("episode finished.")
