"""Warm pytest workers: a process in the sandbox that has imported pytest and forks one run per test run.

A cold test run starts a Python interpreter, imports pytest, its built-in plugins and the
installed entry-point plugins before it reads a single test: most of its CPU time for a small
project. A warm worker (`warm_prog.py`, the inside) is started once per sandbox and start-up key
(`WorkerKey`: the interpreter or the pytest script, and the environment variables read at
interpreter start) as a service of the sandbox's supervisor: it lives in the sandbox's namespaces,
is not killed at the end of an exec, and dies with the supervisor (close, snapshot, restore, its
death). Each run is a request on the worker's own control socket, answered exactly like an exec
through the supervisor (the same loop runs in there, with a `_spawn` that forks): stdout and
stderr pipes, the timeout, the output caps, the kill of the whole subtree before the reply.

`parse_pytest_command` says which commands qualify: `[env] [NAME=value ...] <python> -m pytest
ARGS` or `... pytest|py.test ARGS`, with no shell syntax, no interpreter options and no
assignment of a variable the interpreter reads at start (PYTHON* but PYTHONPATH, LANG, LC_*).
Anything else runs cold, as does a run the worker declines (a file in the workspace or on
PYTHONPATH that shadows a module it imported), a worker that cannot start or was restarted
once already, and every backend without a supervisor.

Protects against: what `warm_prog.py` says. The worker holds no key and no file of any run; its
channel has no path and is close-on-exec; a worker that stops answering a kill ends the sandbox's
namespace, as a supervisor that stops answering does.
"""

from __future__ import annotations

import asyncio
import functools
import marshal
import os
import platform
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhabit.sandbox.base import WarmUnavailable
from inhabit.sandbox.supervisor import START_TIMEOUT_S, Channel, Supervisor, program

__all__ = ["PytestCommand", "WarmUnavailable", "WarmWorker", "parse_pytest_command", "startup_key"]

# What the worker's interpreter runs: drop sys.path[0] ('' = the cwd, which is the workspace
# at spawn) before anything is imported, leave the workspace, take the program from the socket.
BOOT = (
    "import sys,os;del sys.path[0];os.chdir('/');import _socket;"
    "_ctl=_socket.socket(fileno=int(sys.argv[1]));exec(_ctl.recv(1<<20))"
)
# The worker starts with address-space layout randomization off, as every cold test run does
# (`inhabit.grading.testrun.NO_ASLR_PROBE`): its forks then put every object where a cold run
# would, so ids that follow the order of a set hashed by address (None on Python 3.11) match. A
# sandbox without setarch cannot start the worker, and its runs are cold.
NO_ASLR = ("setarch", platform.machine(), "-R")
MAX_STARTS = 2  # per sandbox supervisor and key: the first start and one restart
_SHELL = set("|&;<>()$`\\*?[]#~{}!\n")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PYTHON = re.compile(r"python(3(\.\d+)?)?")


@functools.lru_cache(maxsize=1)
def worker_program() -> bytes:
    return (Path(__file__).parent / "warm_prog.py").read_bytes()


@dataclass(frozen=True)
class PytestCommand:
    """A test command the worker can run in place of a cold interpreter."""

    program: str
    """The python (with `-m pytest`) or the pytest script, as written (a name looked up on PATH)."""
    script: bool
    args: tuple[str, ...]
    """pytest's arguments in the command."""
    assign: tuple[tuple[str, str], ...]
    """Environment assignments before the program (`env A=1` or `A=1`)."""


def parse_pytest_command(command: str) -> PytestCommand | str:
    """The command as a `PytestCommand`, or why it cannot run warm."""
    if any(c in _SHELL for c in command):
        return "shell syntax in the command"
    try:
        words = shlex.split(command)
    except ValueError:
        return "the command is not plain shell words"
    assign: list[tuple[str, str]] = []
    while words:
        if words[0] == "env":
            words.pop(0)
            if words and words[0].startswith("-"):
                return "env options in the command"
            continue
        name, eq, value = words[0].partition("=")
        if not eq or not _NAME.fullmatch(name):
            break
        if _read_at_interpreter_start(name):
            return f"the command sets {name}, which the interpreter reads at start"
        assign.append((name, value))
        words.pop(0)
    if not words:
        return "no program in the command"
    base = os.path.basename(words[0])
    if _PYTHON.fullmatch(base):
        if words[1:3] != ["-m", "pytest"]:
            return "not `python -m pytest` (interpreter options, or another module)"
        return PytestCommand(words[0], False, tuple(words[3:]), tuple(assign))
    if base in ("pytest", "py.test"):
        return PytestCommand(words[0], True, tuple(words[1:]), tuple(assign))
    return "not a pytest command"


def _read_at_interpreter_start(name: str) -> bool:
    """Whether the interpreter reads the variable `name` as it starts (PYTHONPATH aside: the
    worker rebuilds sys.path from it per run)."""
    return name != "PYTHONPATH" and (name.startswith(("PYTHON", "LC_")) or name in ("LANG", "LANGUAGE"))


def startup_key(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of `env` that the interpreter or pytest's plugin autoload read at start."""
    return tuple(
        sorted(
            (k, v)
            for k, v in env.items()
            if _read_at_interpreter_start(k) or k == "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
        )
    )


def pythonpath_entries(env: Mapping[str, str]) -> list[str] | str:
    """PYTHONPATH's entries as the interpreter uses them, or why the worker cannot mimic them."""
    value = env.get("PYTHONPATH")
    if not value:
        return []
    entries = value.split(":")
    for e in entries:
        if not e or any(part in (".", "..") for part in e.split("/")):
            return "an empty, . or .. entry in PYTHONPATH"
    return entries


class WarmWorker(Channel):
    """The host's end of one worker's control socket."""

    def __init__(self, sock: Any, sup: Supervisor, key: Any, script: str | None):
        super().__init__(sock, sup.loop)
        self.sup, self.key, self.script = sup, key, script

    def _ended(self) -> None:
        if self.sup.workers.get(self.key) is self:
            del self.sup.workers[self.key]

    def kill(self) -> None:
        """A worker that does not confirm a kill: end the whole namespace (see Supervisor.run)."""
        self._lost("killed")
        self.sup.kill()

    @classmethod
    async def start(
        cls,
        sup: Supervisor,
        key: Any,
        interpreter: str,
        script: str | None,
        env: Mapping[str, str],
        workspace: str,
    ) -> WarmWorker:
        """Start a worker (`interpreter` with `env` minus PYTHONPATH) and wait for its warm-up."""
        sock = await sup.start_service(
            [*NO_ASLR, interpreter, "-c", BOOT], {k: v for k, v in env.items() if k != "PYTHONPATH"}
        )
        worker = cls(sock, sup, key, script)
        ready = worker._pending[0] = sup.loop.create_future()
        try:
            for msg in (worker_program(), program(), marshal.dumps({"workspace": workspace}, 2)):
                sock.send(msg)
            kind, value = await asyncio.wait_for(asyncio.shield(ready), START_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            worker._lost(f"did not start: {e}")
            raise WarmUnavailable(f"the worker did not start: {e}") from e
        finally:
            worker._pending.pop(0, None)
        if kind != "ready":
            worker._lost("declined")
            raise WarmUnavailable(f"the worker did not start: {value or kind}"[:200])
        return worker


def shebang_interpreter(text: str) -> str | None:
    """The interpreter of a script's first line (`#!/path/python` or `#!/usr/bin/env python`), or
    None for anything else (options: the worker would not start the same way)."""
    if not text.startswith("#!"):
        return None
    words = text[2:].split("\n", 1)[0].split()
    if len(words) == 1:
        return words[0]
    if len(words) == 2 and os.path.basename(words[0]) == "env" and not words[1].startswith("-"):
        return words[1]
    return None
