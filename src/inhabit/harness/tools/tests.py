"""run_tests: the task's test command (or the configured default), summarized per test.

The per-test outcomes come from JUnit XML through `inhabit.grading.testrun.run_tests` (the grading
part's helper), so the model sees the same facts grading will read, never a console scrape. This
run happens in the agent's own sandbox, without the task's hidden tests: it is a tool, not grading.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Mapping
from typing import Any

from inhabit.harness.tools.base import ArgSpec, Observation, Tool, ToolContext, ToolError, ToolSpec, cap_text


class RunTests(Tool):
    spec = ToolSpec(
        "run_tests",
        "Run the task's test command and summarize per-test outcomes (pass/fail/error/skip).",
        (ArgSpec("selector", "line", False, "run only these tests, e.g. tests/test_calc.py::test_add"),),
    )
    read_only = False  # tests may write files (caches, fixtures' outputs)

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        from inhabit.errors import GradingError
        from inhabit.grading.testrun import run_tests

        selector = args.get("selector") or None
        command = ctx.test_command or await default_test_command(ctx)
        try:
            result = await run_tests(
                ctx.sandbox, command, selector=selector, timeout_s=ctx.config.test_timeout_s
            )
        except GradingError as e:
            raise ToolError(f"the tests could not be run: {e}") from e
        text, cut = cap_text(_describe(result), ctx.config.observation_max_chars, "run a narrower selector")
        failed = getattr(result, "exit_code", 0) not in (0, None)
        return Observation(text, error=failed, truncated=cut)


async def default_test_command(ctx: ToolContext) -> str:
    """`python -m pytest` if the sandbox's python has pytest, else the Python running inhabit's."""
    if "test_command" not in ctx.cache:
        probe = await ctx.sandbox.exec("python -c 'import pytest'", timeout_s=30)
        python = "python" if probe.ok else shlex.quote(sys.executable)
        ctx.cache["test_command"] = f"{python} -m pytest -q -p no:cacheprovider"
    return str(ctx.cache["test_command"])


def _describe(result: Any) -> str:
    """The summary line, then each test that did not pass with the first lines of its message."""
    lines = [str(result.summary)]
    messages = getattr(result, "messages", {}) or {}
    for node, outcome in sorted(getattr(result, "outcomes", {}).items()):
        if outcome != "passed":
            msg = str(messages.get(node, "")).strip().splitlines()
            lines.append(f"{outcome.upper()} {node}" + (f": {' | '.join(msg[-3:])[:400]}" if msg else ""))
    for node, err in sorted((getattr(result, "collection_errors", {}) or {}).items()):
        lines.append(f"COLLECTION ERROR {node}: {str(err).strip()[-400:]}")
    tail = str(getattr(result, "output_tail", "") or "").strip()
    if not getattr(result, "outcomes", None) and tail:
        lines.append("--- output (last lines) ---\n" + "\n".join(tail.splitlines()[-15:]))
    return "\n".join(lines)
