"""Tools that run a program inside the sandbox: run (any shell command), grep, lint (ruff).

All three go through `Sandbox.exec`, so they obey the sandbox's isolation and limits. `run` may
change anything in the workspace; the loop still runs it in parallel with other calls of the same
turn (the system prompt tells the model to put dependent steps in later turns).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from typing import Any

from inhabit.harness.tools.base import (
    ArgSpec,
    Observation,
    Tool,
    ToolContext,
    ToolError,
    ToolSpec,
    cap_text,
    workspace_path,
)
from inhabit.sandbox.base import ExecResult

_MAX_LINE_CHARS = 300


def format_exec(result: ExecResult, limit: int, timeout_s: float | None = None) -> tuple[str, bool]:
    """Exit code plus capped stdout/stderr, the way `run` shows a command's outcome."""
    if result.timed_out:
        head = f"exit code: {result.exit_code} (timed out after {timeout_s or result.duration_s:.0f}s and was killed)"
    else:
        head = f"exit code: {result.exit_code}"
    if result.limit_hit and not result.timed_out:  # which sandbox limit stopped it, and how to adapt
        head += f"\n{result.limit_hit}"
    parts = [head]
    half = max(limit // 2, 200)
    truncated = result.stdout_truncated or result.stderr_truncated
    hint = "redirect the output to a file and read_file or grep it"
    for label, text, cut_by_sandbox in (
        ("stdout", result.stdout, result.stdout_truncated),
        ("stderr", result.stderr, result.stderr_truncated),
    ):
        if not text:
            continue
        shown, cut = cap_text(text, half if result.stdout and result.stderr else limit, hint)
        truncated |= cut
        marker = "\n[... output cut by the sandbox's output limit ...]" if cut_by_sandbox else ""
        parts.append(f"--- {label} ---\n{shown.rstrip()}{marker}")
    if not result.stdout and not result.stderr:
        parts.append("(no output)")
    return "\n".join(parts), truncated


class Run(Tool):
    spec = ToolSpec(
        "run",
        "Run a shell command (sh -c) in the repository root; shows the exit code and capped output.",
        (
            ArgSpec("command", "line", True, "the shell command"),
            ArgSpec("timeout_s", "int", False, "seconds before the command is killed (default 60)"),
        ),
    )
    read_only = False

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        command: str = args["command"]
        if not command:
            raise ToolError("command is empty.")
        timeout = args.get("timeout_s", ctx.config.run_default_timeout_s)
        if timeout < 1:
            raise ToolError(f"timeout_s must be at least 1, got {timeout}.")
        timeout = min(float(timeout), ctx.config.run_max_timeout_s)
        result = await ctx.sandbox.exec(command, timeout_s=timeout)
        text, truncated = format_exec(result, ctx.config.observation_max_chars, timeout)
        return Observation(text, error=not result.ok, truncated=truncated)


class Grep(Tool):
    spec = ToolSpec(
        "grep",
        "Search file contents with a regular expression (Perl/Python syntax); prints file:line:text.",
        (
            ArgSpec("pattern", "line", True, "regular expression (surrounding whitespace is stripped)"),
            ArgSpec("path", "line", False, "file or directory to search (default: the repository root)"),
            ArgSpec("glob", "line", False, "only files whose name matches, e.g. *.py"),
        ),
    )

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        pattern: str = args["pattern"]
        if not pattern:
            raise ToolError("pattern is empty.")
        if "\n" in pattern:
            raise ToolError("pattern must be one line (grep matches line by line).")
        try:
            re.compile(pattern)
        except re.error as e:
            raise ToolError(f"pattern is not a valid regular expression: {e}.") from e
        path = workspace_path(args.get("path") or ".")
        argv = ["grep", "-rnIP", "--color=never"]
        for d in (".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".venv", "node_modules"):
            argv.append(f"--exclude-dir={d}")
        if args.get("glob"):
            argv.append(f"--include={args['glob']}")
        argv += ["-e", pattern, "--", path]
        result = await ctx.sandbox.exec(argv, timeout_s=60)
        if result.exit_code == 1 and not result.stderr.strip():
            return Observation(f"no matches for {pattern!r} in {path}.")
        if result.exit_code not in (0, 1) and not result.stdout:
            raise ToolError(f"grep failed: {result.stderr.strip()[:500] or f'exit code {result.exit_code}'}")
        lines = result.stdout.splitlines()
        limit = ctx.config.grep_max_matches
        shown = []
        for line in lines[:limit]:
            if line.startswith("./"):
                line = line[2:]
            if len(line) > _MAX_LINE_CHARS:
                line = line[:_MAX_LINE_CHARS] + " [... line cut]"
            shown.append(line)
        body = "\n".join(shown)
        truncated = len(lines) > limit or result.stdout_truncated
        if truncated:
            body += (
                f"\n[... {max(len(lines) - limit, 0)} more matching lines not shown; narrow the pattern, "
                "path or glob ...]"
            )
        body, cut = cap_text(body, ctx.config.observation_max_chars, "narrow the pattern, path or glob")
        return Observation(body, truncated=truncated or cut)


class Lint(Tool):
    spec = ToolSpec(
        "lint",
        "Run the ruff linter and list its findings (file:line:col: code message).",
        (ArgSpec("path", "line", False, "file or directory to lint (default: the repository root)"),),
    )

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        path = workspace_path(args.get("path") or ".")
        command = ctx.config.ruff_invocation(
            f"check --no-cache --output-format concise --no-fix -- {shlex.quote(path)}"
        )
        result = await ctx.sandbox.exec(command, timeout_s=120)
        if result.exit_code == 127 or "No module named ruff" in result.stderr:
            raise ToolError("ruff is not available in this sandbox; use run to call another linter.")
        if result.exit_code == 0:
            return Observation(f"ruff: no findings in {path}.")
        out = (result.stdout + result.stderr).strip()
        if result.exit_code != 1:
            raise ToolError(f"ruff failed (exit code {result.exit_code}): {out[:1000]}")
        body, cut = cap_text(out, ctx.config.observation_max_chars, "lint a single file")
        return Observation(body, truncated=cut)
