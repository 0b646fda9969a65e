"""A guard process between a run and a server it starts (vLLM), so the server dies with the run.

The server runs in its own process group (it forks an engine core and workers; stopping it means
signalling the whole group). A group of its own also means a run that dies without cleaning up
(SIGKILL, or SIGTERM/SIGINT while the server is still starting, before any handler could stop it)
would leave it running, reparented to init. So the run starts this guard instead, as the leader of
the new group, and the guard starts the server inside that group:

- the guard asks the kernel for SIGTERM when its parent dies (`PR_SET_PDEATHSIG`), and exits at
  once if the parent is already gone;
- on SIGTERM or SIGINT (the parent's death, or `VLLMServer.stop`) it sends SIGTERM to the whole
  group, gives the server `GRACE_S` to shut its workers down, then SIGKILLs the group (itself too);
- when the server exits by itself, the guard exits with its status.

Linux only (prctl). What it does not cover: `PR_SET_PDEATHSIG` fires when the *thread* that
started the guard exits; the caller starts it from a thread that lives as long as the run's
event loop (the default executor's, or the main thread).

`wrap(command)` is the argv that runs `command` under the guard, with no import of inhabit in the
guard (its code travels as `-c` text, so it works whatever the server's environment).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

GRACE_S = 20.0

_GUARD = r"""
import ctypes, os, signal, subprocess, sys, time
PR_SET_PDEATHSIG = 1
ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
if os.getppid() != int(sys.argv[1]):
    sys.exit(1)  # the run died before the guard could ask to be told
grace = float(sys.argv[2])
child = subprocess.Popen(sys.argv[3:])

def end(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    group = os.getpgrp()
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.1)
    os.killpg(group, signal.SIGKILL)

signal.signal(signal.SIGTERM, end)
signal.signal(signal.SIGINT, end)
sys.exit(child.wait())
"""


def wrap(command: Sequence[str], parent_pid: int, grace_s: float = GRACE_S) -> list[str]:
    """The argv that runs `command` under the guard; start it with `start_new_session=True`."""
    return [sys.executable, "-c", _GUARD, str(parent_pid), str(grace_s), *command]
