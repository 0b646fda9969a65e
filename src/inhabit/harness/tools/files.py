"""File tools: read_file, write_file, edit_file, list_dir (names and arguments: docs/architecture.md).

They go through the sandbox's file API (never the host), so they work the same on a local, an
isolated or a remote sandbox.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

from inhabit.errors import PathOutsideWorkspace
from inhabit.harness.tools.base import (
    ArgSpec,
    Observation,
    Tool,
    ToolContext,
    ToolError,
    ToolSpec,
    cap_text,
    decode,
    workspace_path,
)

# Directories no listing should drown in.
NOISE_DIRS = frozenset(
    {".git", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".venv", "node_modules"}
)


@contextlib.contextmanager
def _file_errors(path: str) -> Iterator[None]:
    try:
        yield
    except FileNotFoundError as e:
        raise ToolError(f"{path}: no such file. Use list_dir or grep to find the right path.") from e
    except IsADirectoryError as e:
        raise ToolError(f"{path} is a directory; use list_dir to see what it holds.") from e
    except NotADirectoryError as e:
        raise ToolError(f"{path}: a parent of this path is a file, not a directory.") from e
    except PathOutsideWorkspace as e:
        raise ToolError(f"{path} is outside the workspace; use paths relative to the repository root.") from e


async def read_text(ctx: ToolContext, path: str) -> str:
    with _file_errors(path):
        data = await ctx.sandbox.read_file(path)
    if b"\x00" in data[:8192]:
        raise ToolError(f"{path} is a binary file ({len(data)} bytes); it cannot be shown as text.")
    return decode(data)


def number_lines(lines: list[str], first: int) -> str:
    width = len(str(first + len(lines) - 1))
    return "\n".join(f"{i:>{width}}\t{line}" for i, line in enumerate(lines, start=first))


class ReadFile(Tool):
    spec = ToolSpec(
        "read_file",
        "Show a file with numbered lines (1-based). Give start_line/end_line to see part of a long file.",
        (
            ArgSpec("path", "line", True, "file path relative to the repository root"),
            ArgSpec("start_line", "int", False, "first line to show (default 1)"),
            ArgSpec("end_line", "int", False, "last line to show, inclusive (default: a screenful)"),
        ),
    )

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        path = workspace_path(args["path"])
        text = await read_text(ctx, path)
        lines = text.splitlines()
        total = len(lines)
        start = args.get("start_line", 1)
        if start < 1:
            raise ToolError(f"start_line must be at least 1, got {start}.")
        if total == 0:
            return Observation(f"{path} is empty (0 lines).")
        if start > total:
            raise ToolError(f"start_line {start} is past the end of {path}, which has {total} lines.")
        limit = ctx.config.read_file_max_lines
        end = args.get("end_line")
        if end is not None and end < start:
            raise ToolError(f"end_line ({end}) must not be before start_line ({start}).")
        wanted_end = min(end if end is not None else start + limit - 1, total)
        shown_end = min(wanted_end, start + limit - 1)
        body = number_lines(lines[start - 1 : shown_end], start)
        truncated = shown_end < total and (end is None or shown_end < wanted_end)
        if truncated:
            body += (
                f"\n[... showing lines {start}-{shown_end} of {total}; call read_file with "
                f"start_line={shown_end + 1} to see more ...]"
            )
        body, cut = cap_text(body, ctx.config.observation_max_chars, "read a smaller line range")
        return Observation(body, truncated=truncated or cut)


class WriteFile(Tool):
    spec = ToolSpec(
        "write_file",
        "Create a file or replace its whole content (parent directories are created).",
        (
            ArgSpec("path", "line", True, "file path relative to the repository root"),
            ArgSpec("content", "text", True, "the complete new content, kept exactly"),
        ),
    )
    read_only = False

    def write_target(self, args: Mapping[str, Any]) -> str | None:
        return workspace_path(args["path"])

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        path = workspace_path(args["path"])
        content: str = args["content"]
        existed = True
        with _file_errors(path):
            try:
                await ctx.sandbox.read_file(path)
            except FileNotFoundError:
                existed = False
            await ctx.sandbox.write_file(path, content.encode("utf-8"))
        verb = "replaced" if existed else "created"
        return Observation(
            f"{verb} {path} ({len(content.splitlines())} lines, {len(content.encode())} bytes)"
        )


class EditFile(Tool):
    spec = ToolSpec(
        "edit_file",
        "Replace exactly one occurrence of `old` with `new` in a file (error if `old` occurs 0 or >1 times).",
        (
            ArgSpec("path", "line", True, "file path relative to the repository root"),
            ArgSpec("old", "text", True, "the exact text to replace, whitespace included"),
            ArgSpec("new", "text", True, "the replacement text"),
        ),
    )
    read_only = False

    def write_target(self, args: Mapping[str, Any]) -> str | None:
        return workspace_path(args["path"])

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        path = workspace_path(args["path"])
        old: str = args["old"]
        new: str = args["new"]
        if not old:
            raise ToolError("old must not be empty; to create or replace a whole file use write_file.")
        text = await read_text(ctx, path)
        count = text.count(old)
        if count == 0:
            raise ToolError(
                f"old text not found in {path}. read_file it and copy the exact text (indentation and "
                "line ends matter)."
            )
        if count > 1:
            lines = [text.count("\n", 0, i) + 1 for i in _find_all(text, old)]
            shown = ", ".join(map(str, lines[:10]))
            raise ToolError(
                f"old text occurs {count} times in {path} (at lines {shown}); include more surrounding "
                "lines so that it occurs exactly once."
            )
        at = text.index(old)
        updated = text[:at] + new + text[at + len(old) :]
        with _file_errors(path):
            await ctx.sandbox.write_file(path, updated.encode("utf-8"))
        first = updated.count("\n", 0, at) + 1
        new_lines = updated.splitlines()
        lo = max(1, first - 2)
        hi = min(len(new_lines), first + new.count("\n") + 2)
        snippet = number_lines(new_lines[lo - 1 : hi], lo)
        snippet, cut = cap_text(snippet, ctx.config.observation_max_chars, "read_file the edited range")
        return Observation(f"edited {path}; lines {lo}-{hi} now read:\n{snippet}", truncated=cut)


def _find_all(text: str, sub: str) -> Iterator[int]:
    i = text.find(sub)
    while i >= 0:
        yield i
        i = text.find(sub, i + 1)


class ListDir(Tool):
    spec = ToolSpec(
        "list_dir",
        "Show the tree under a directory (directories end in '/'; caches and .git are left out).",
        (
            ArgSpec("path", "line", False, "directory relative to the repository root (default: the root)"),
            ArgSpec("depth", "int", False, "how many levels to show (default 2)"),
        ),
    )

    async def run(self, ctx: ToolContext, args: Mapping[str, Any]) -> Observation:
        path = workspace_path(args.get("path") or ".")
        depth = args.get("depth", ctx.config.list_dir_default_depth)
        if depth < 1:
            raise ToolError(f"depth must be at least 1, got {depth}.")
        with _file_errors(path):
            entries = await ctx.sandbox.list_files(path, recursive=True)
        prefix = "" if path == "." else path.rstrip("/") + "/"
        lines: list[str] = []
        hidden = 0
        for entry in entries:
            rel = entry.path[len(prefix) :] if entry.path.startswith(prefix) else entry.path
            parts = rel.split("/")
            if not rel or any(p in NOISE_DIRS for p in parts):
                continue
            if len(parts) > depth:
                continue
            if len(lines) >= ctx.config.list_dir_max_entries:
                hidden += 1
                continue
            indent = "  " * (len(parts) - 1)
            suffix = "/" if entry.kind == "dir" else ""
            size = f"  ({entry.size} bytes)" if entry.kind == "file" else ""
            lines.append(f"{indent}{parts[-1]}{suffix}{size}")
        if not lines:
            return Observation(f"{path} is empty (or holds only caches).")
        body = f"{path}/\n" + "\n".join(lines)
        if hidden:
            body += f"\n[... {hidden} more entries not shown; list a subdirectory or use a smaller depth ...]"
        return Observation(body, truncated=hidden > 0)
