"""Each of the ten tools against a real sandbox: what it shows, and the errors the model gets."""

from __future__ import annotations

import pytest

from inhabit.harness.config import HarnessConfig
from inhabit.harness.tools import TOOLS, ToolContext, ToolError, bind_args
from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.sandbox.base import WORKSPACE_MOUNT


async def call(ctx: ToolContext, name: str, **raw: str):
    tool = TOOLS[name]
    return await tool.run(ctx, bind_args(tool.spec, raw))


def test_the_ten_tools_and_their_arguments_match_design() -> None:
    sigs = {t.spec.signature() for t in TOOLS.values()}
    assert sigs == {
        "read_file(path, start_line?, end_line?)",
        "write_file(path, content)",
        "edit_file(path, old, new)",
        "list_dir(path?, depth?)",
        "grep(pattern, path?, glob?)",
        "semantic_search(query, top_k?)",
        "lint(path?)",
        "run(command, timeout_s?)",
        "run_tests(selector?)",
        "finish(message)",
    }


def test_bind_args_reports_missing_extra_and_non_integer() -> None:
    spec = TOOLS["read_file"].spec
    with pytest.raises(ToolError) as e:
        bind_args(spec, {"start_line": "ten", "colour": "red"})
    msg = str(e.value)
    assert (
        "missing <path>" in msg and "unexpected <colour>" in msg and "<start_line> must be an integer" in msg
    )
    assert bind_args(spec, {"path": " a.py\n", "start_line": " 3 "}) == {"path": "a.py", "start_line": 3}


async def test_read_file_numbers_lines_and_pages(ctx: ToolContext) -> None:
    obs = await call(ctx, "read_file", path="calc.py")
    assert obs.text.splitlines()[0] == "1\tdef add(a, b):"
    obs = await call(ctx, "read_file", path="calc.py", start_line="5", end_line="6")
    assert obs.text.splitlines() == ["5\tdef sub(a, b):", "6\t    return a - b"]
    await ctx.sandbox.write_file("long.txt", "".join(f"line {i}\n" for i in range(1, 1001)))
    obs = await call(ctx, "read_file", path="long.txt")
    assert obs.truncated and "showing lines 1-400 of 1000" in obs.text and "start_line=401" in obs.text
    with pytest.raises(ToolError, match="no such file"):
        await call(ctx, "read_file", path="nope.py")
    with pytest.raises(ToolError, match="past the end"):
        await call(ctx, "read_file", path="calc.py", start_line="99")
    with pytest.raises(ToolError, match="outside the workspace"):
        await call(ctx, "read_file", path="../../etc/passwd")


@pytest.mark.parametrize("backend", ["process", "bwrap"])
async def test_the_repository_path_inside_names_the_workspace(
    backend: str, repo, hconfig: HarnessConfig
) -> None:
    """The absolute path `run` shows (`pwd`) is one the file tools accept for the same files;
    the old `/workspace` is just another path outside the workspace."""
    if backend == "bwrap":
        pytest.importorskip("inhabit.sandbox.bwrap")
    prov = create_provider(SandboxConfig(backend=backend))
    try:
        async with await prov.create(repo) as sb:
            ctx = ToolContext(sandbox=sb, config=hconfig, test_command=hconfig.test_command)
            obs = await call(ctx, "run", command="pwd")
            if sb.info.isolated:
                assert WORKSPACE_MOUNT in obs.text.splitlines()
            await call(ctx, "write_file", path=f"{WORKSPACE_MOUNT}/pkg/new.py", content="x = 1\n")
            assert await sb.read_file("pkg/new.py") == b"x = 1\n"
            obs = await call(ctx, "read_file", path=f"{WORKSPACE_MOUNT}/calc.py")
            assert obs.text.splitlines()[0] == "1\tdef add(a, b):"
            obs = await call(ctx, "list_dir", path=WORKSPACE_MOUNT)
            assert "calc.py" in obs.text
            for bad in ("/workspace/calc.py", "/home/dev", f"{WORKSPACE_MOUNT}/../x"):
                with pytest.raises(ToolError, match="outside the workspace"):
                    await call(ctx, "read_file", path=bad)
    finally:
        await prov.close()


async def test_write_and_edit_file(ctx: ToolContext) -> None:
    obs = await call(ctx, "write_file", path="pkg/new.py", content="x = 1\n")
    assert obs.text.startswith("created pkg/new.py")
    assert await ctx.sandbox.read_file("pkg/new.py") == b"x = 1\n"
    obs = await call(
        ctx,
        "edit_file",
        path="calc.py",
        old="def add(a, b):\n    return a - b",
        new="def add(a, b):\n    return a + b",
    )
    assert "edited calc.py" in obs.text and "a + b" in obs.text
    assert (await ctx.sandbox.read_file("calc.py")).decode().count("a + b") == 1
    with pytest.raises(ToolError, match="occurs 2 times"):
        await call(ctx, "edit_file", path="calc.py", old="def ", new="def  ")
    with pytest.raises(ToolError, match="not found"):
        await call(ctx, "edit_file", path="calc.py", old="nothing like this", new="x")


async def test_list_dir_tree(ctx: ToolContext) -> None:
    await ctx.sandbox.write_file("__pycache__/junk.pyc", b"\0")
    obs = await call(ctx, "list_dir")
    assert "calc.py" in obs.text and "tests/" in obs.text and "  test_calc.py" in obs.text
    assert "__pycache__" not in obs.text
    obs = await call(ctx, "list_dir", path="tests", depth="1")
    assert "test_calc.py" in obs.text and "calc.py  (" not in obs.text.replace("test_calc.py", "")


async def test_grep_finds_file_line_text(ctx: ToolContext) -> None:
    obs = await call(ctx, "grep", pattern=r"def \w+\(a, b\)", glob="*.py")
    assert "calc.py:1:def add(a, b):" in obs.text and "calc.py:5:def sub(a, b):" in obs.text
    obs = await call(ctx, "grep", pattern="zzz_not_there")
    assert "no matches" in obs.text
    with pytest.raises(ToolError, match="not a valid regular expression"):
        await call(ctx, "grep", pattern="(unclosed")


async def test_run_shows_exit_code_output_and_timeouts(ctx: ToolContext) -> None:
    obs = await call(ctx, "run", command="echo hi; echo oops >&2; exit 3")
    assert obs.error and "exit code: 3" in obs.text and "hi" in obs.text and "oops" in obs.text
    obs = await call(ctx, "run", command="sleep 5", timeout_s="1")
    assert obs.error and "timed out" in obs.text
    obs = await call(ctx, "run", command="python3 -c \"print('x' * 50000)\"")
    assert obs.truncated and "characters truncated" in obs.text and len(obs.text) < 13_000


async def test_lint_runs_ruff(ctx: ToolContext) -> None:
    await ctx.sandbox.write_file("bad.py", "import os\n")
    obs = await call(ctx, "lint", path="bad.py")
    assert "F401" in obs.text
    obs = await call(ctx, "lint", path="calc.py")
    assert "no findings" in obs.text


async def test_finish(ctx: ToolContext) -> None:
    obs = await call(ctx, "finish", message="done")
    assert not obs.error


async def test_run_tests_summarizes_per_test_outcomes(ctx: ToolContext) -> None:
    obs = await call(ctx, "run_tests")
    assert "1 passed" in obs.text and "1 failed" in obs.text
    assert "FAILED tests/test_calc.py::test_add" in obs.text and obs.error
    obs = await call(ctx, "run_tests", selector="tests/test_calc.py::test_sub")
    assert obs.text.startswith("1 passed") and not obs.error


async def test_run_tests_without_a_task_command_finds_a_pytest(ctx: ToolContext) -> None:
    ctx.test_command = None
    obs = await call(ctx, "run_tests", selector="tests/test_calc.py")
    assert "1 passed" in obs.text and "1 failed" in obs.text
    assert ctx.cache["test_command"].endswith("-m pytest -q -p no:cacheprovider")


def test_run_observation_names_the_limit_that_stopped_a_command():
    from inhabit.harness.tools.shell import format_exec
    from inhabit.sandbox.base import ExecResult, SandboxLimits, limit_message

    hit = limit_message(-9, False, 60, SandboxLimits(memory_mb=512), oom_kills=1)
    text, _ = format_exec(ExecResult(-9, "", "Killed\n", 1.0, limit_hit=hit), 4000)
    assert "memory limit" in text and "512 MB" in text
