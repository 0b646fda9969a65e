"""Process backend specifics: it warns loudly, and cleans up what it started."""

from __future__ import annotations

import logging
import os
import time

from inhabit.sandbox import SandboxConfig, create_provider
from inhabit.sandbox.process import ProcessSandboxProvider


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


async def test_warns_that_it_isolates_nothing(caplog, workspace):
    with caplog.at_level(logging.WARNING, logger="inhabit"):
        prov = ProcessSandboxProvider()
    try:
        assert any("ISOLATES NOTHING" in r.getMessage() for r in caplog.records)
        async with await prov.create(workspace) as sb:
            assert sb.info.isolated is False
    finally:
        await prov.close()


async def test_create_provider_process(workspace):
    prov = create_provider(SandboxConfig(backend="process"))
    try:
        assert isinstance(prov, ProcessSandboxProvider)
    finally:
        await prov.close()


async def test_close_kills_escaped_background_process(workspace):
    prov = ProcessSandboxProvider()
    sb = await prov.create(workspace)
    r = await sb.exec("setsid sleep 60 > /dev/null 2>&1 < /dev/null & echo $!")
    pid = int(r.stdout.strip())
    await sb.close()
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid)
    await prov.close()
    assert not prov.root.exists()


async def test_bare_python_is_inhabits_interpreter_whatever_the_callers_path(workspace, monkeypatch):
    """A portable task's command says `python`: in this backend it must be the interpreter running
    inhabit (with pytest), not the first `python` of the caller's PATH (none here)."""
    import sys
    from pathlib import Path

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    prov = ProcessSandboxProvider()
    try:
        async with await prov.create(workspace) as sb:
            res = await sb.exec("python -c 'import sys, pytest; print(sys.prefix)'")
            assert res.ok, res.stderr
            assert Path(res.stdout.strip()).resolve() == Path(sys.prefix).resolve()
    finally:
        await prov.close()
