"""A run that starts a vLLM server takes it down when it dies, however it dies.

A stand-in for vLLM (`VLLMConfig.command`: a Python that forks a worker, as vLLM forks its engine
core, and never answers) is started by a real `VLLMServer.start()` in a separate "run" process,
which is then killed with SIGTERM (it installs no handler: the default action, as `inhabit train`
stopped while vLLM starts) or SIGKILL. Both the server and its worker must be gone within the
guard's grace period, not reparented to init.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[3] / "src"
FAKE_VLLM = (
    "import subprocess, sys, time\n"
    "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
    "open(sys.argv[1], 'w').write(f'{__import__(\"os\").getpid()} {worker.pid}')\n"
    "time.sleep(600)\n"
)
RUN = (
    "import sys\n"
    "from inhabit.inference.vllm_backend import VLLMConfig, VLLMServer\n"
    "cmd = [sys.executable, '-c', sys.argv[1], sys.argv[2]]\n"
    "VLLMServer(VLLMConfig(model='.', command=cmd, startup_timeout_s=600)).start()\n"
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state != "Z"  # a zombie has exited (init reaps it when it will)


@pytest.mark.skipif(sys.platform != "linux", reason="PR_SET_PDEATHSIG is Linux's")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_dead_run_takes_its_vllm_server_and_workers_down(tmp_path, sig):
    pids_file = tmp_path / "pids"
    env = os.environ | {"PYTHONPATH": str(SRC)}
    run = subprocess.Popen([sys.executable, "-c", RUN, FAKE_VLLM, str(pids_file)], env=env)
    try:
        deadline = time.monotonic() + 60
        while not (pids_file.exists() and len(pids_file.read_text().split()) == 2):
            assert time.monotonic() < deadline and run.poll() is None, "the stand-in never started"
            time.sleep(0.1)
        server, worker = (int(p) for p in pids_file.read_text().split())
        assert _alive(server) and _alive(worker)
        run.send_signal(sig)
        run.wait(timeout=30)
        deadline = time.monotonic() + 30
        while (_alive(server) or _alive(worker)) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server) and not _alive(worker)
    finally:
        if run.poll() is None:
            run.kill()
