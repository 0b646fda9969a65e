"""`[engine] backend / replicas` and `[weights] store` in `inhabit train`, with real parts.

Two embedded replicas behind a `ReplicaSet` share a run's rollouts and each follows every
version; the same run publishes every version to a weight store, from which a `Subscriber`
rebuilds exactly the trainer's final weights. A `remote` backend runs against `inhabit serve` on
loopback. Config mistakes (a vLLM install that is not there, a remote backend without URLs) are
one line and a non-zero exit. The vLLM backend itself runs in `test_vllm_run.py` (slow).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
from typer.testing import CliRunner

from inhabit.cli import app
from inhabit.placement.engine_backends import ReplicaSet, RunEngineConfig
from run_fixtures import TINY_SPEC, merged, tiny_run

SRC = Path(__file__).resolve().parents[2] / "src"


def config(tmp_path, changes: dict | None = None) -> tuple[str, Path]:
    """The tiny run (tests/run_fixtures.py) without the evaluation before training."""
    return tiny_run(tmp_path, merged({"eval": {"before": False}}, changes or {}))


def records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.slow  # ~17 s: a two-replica run
def test_two_embedded_replicas_share_rollouts_and_the_store_holds_every_version(tmp_path):
    from inhabit.models.loading import load_model
    from inhabit.weights.subscribe import Subscriber

    store = tmp_path / "store"
    path, run_dir = config(
        tmp_path, {"steps": 3, "engine": {"replicas": 2}, "weights": {"store": str(store)}}
    )
    result = CliRunner().invoke(app, ["train", path])
    assert result.exit_code == 0, result.output
    steps = [r for r in records(run_dir) if "version" in r and "eval" not in r]
    assert [r["version"] for r in steps] == [1, 2, 3]
    dispatch = steps[-1]["dispatch"]
    assert dispatch["replicas"] == 2 and dispatch["restarts"] == 0 and dispatch["reruns"] == 0
    # every rollout went to one replica, and both replicas served some
    trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
    assert sum(dispatch["rollouts_per_replica"]) >= len(trajs) - 1  # the final eval may still be counted
    assert min(dispatch["rollouts_per_replica"]) > 0
    assert steps[-1]["engine_version"] == 3  # both replicas hold the newest version (min over replicas)

    # The store: versions 1..3, and the newest is the trainer's final weights (bf16, the store's dtype).
    sub = Subscriber(str(store))
    assert sub.sync().version == 3
    ckpt = sorted((run_dir / "checkpoints").iterdir())[-1]
    model, _ = load_model(ckpt)
    final = model.state_dict()
    held = sub.state_dict()
    assert set(held) <= set(final) and held
    for name, tensor in held.items():
        assert torch.equal(tensor, final[name].to(torch.bfloat16)), name


def test_remote_backend_trains_against_inhabit_serve(tmp_path):
    """The run's rollouts go to a real `inhabit serve` on loopback; each version is uploaded to it."""
    from inhabit.inference.config import EngineConfig
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.server import BackgroundServer, create_app
    from inhabit.models.tiny import TinyModelSpec, build_tiny_model, save_model_folder
    from inhabit.orchestrator.quickstart.bootstrap import quickstart_tokenizer

    tok = quickstart_tokenizer()
    spec = TinyModelSpec(**TINY_SPEC)
    folder = save_model_folder(build_tiny_model(spec, vocab_size=len(tok), seed=0), tok, tmp_path / "model")
    engine = EmbeddedEngine.from_path(folder, EngineConfig(seed=0))
    try:
        with BackgroundServer(create_app(engine, engine.tokenizer, model_name="tiny", api_key="k")) as srv:
            path, run_dir = config(
                tmp_path,
                {
                    "model": {"path": str(folder), "spec": None, "tokenizer": None},
                    "engine": {"backend": "remote", "api_key": "k", "urls": [srv.url]},
                },
            )
            result = CliRunner().invoke(app, ["train", path])
            assert result.exit_code == 0, result.output
            steps = [r for r in records(run_dir) if "version" in r and "eval" not in r]
            assert [r["version"] for r in steps] == [1, 2] and steps[-1]["engine_version"] == 2
            assert "mismatch_mean_abs" in steps[-1]["trainer"]
            card = httpx.get(
                srv.url + "/v1/models", headers={"authorization": "Bearer k"}, timeout=10
            ).json()["data"][0]
            assert card["policy_version"] == 2  # the server itself serves the trainer's newest version
        trajs = [json.loads(line) for line in (run_dir / "trajectories.jsonl").read_text().splitlines()]
        versions = {v for t in trajs for s in t["segments"] for turn in s["turns"] for v in turn["versions"]}
        assert 0 in versions and 2 in versions  # the first rollouts, and the final evaluation
    finally:
        asyncio.run(engine.close())


@pytest.mark.parametrize(
    ("override", "says"),
    [
        (["engine.backend=vllm", "engine.vllm.venv=/nonexistent/venv"], "scripts/setup-vllm.sh"),
        (["engine.backend=remote"], "engine.urls"),
        (["engine.backend=vllm", "placement=ray"], "placement 'local'"),
    ],
)
def test_engine_config_mistakes_are_one_clear_line(tmp_path, override, says):
    path, run_dir = config(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    proc = subprocess.run(
        [sys.executable, "-m", "inhabit", "train", path, *override],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    # one error (a config file's validation error names the file, then the field, on its own line)
    assert says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) <= 2, proc.stderr
    assert not (run_dir / "cache").exists()  # failed before any work


@pytest.mark.slow  # ~18 s: a run against a server that answers errors
def test_a_run_whose_engine_answers_only_errors_stops_with_the_reason(tmp_path):
    """Nothing listens at the remote URL: every rollout fails, and the run ends in one line."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    path, run_dir = config(tmp_path, {"engine": {"backend": "remote", "urls": [f"http://127.0.0.1:{port}"]}})
    proc = subprocess.run(
        [sys.executable, "-m", "inhabit", "train", path, "rollout.max_failure_streak=4",
         "rollout.timeout_s=60"],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(SRC)}, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    last = [line for line in proc.stderr.splitlines() if line.strip()][-1]
    assert "the last 4 rollouts all failed" in last and "policy_error" in last, proc.stderr
    trajs = (run_dir / "trajectories.jsonl").read_text().splitlines()
    assert len(trajs) >= 4  # the failures are recorded, as data


async def test_replica_set_leases_the_least_busy_and_loads_every_replica():
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.engine import GenerationRequest, SamplingParams
    from inhabit.models.tiny import build_tiny_model
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    engines = [
        EmbeddedEngine(build_tiny_model("dense-1m", vocab_size=len(tok), seed=0), tok) for _ in range(2)
    ]
    pool = ReplicaSet(engines)
    try:
        a, b, c = pool.lease(), pool.lease(), pool.lease()
        assert (a.replica.index, b.replica.index, c.replica.index) == (0, 1, 0)
        b.release()
        assert pool.lease().replica.index == 1  # 1 has none in flight again
        new = build_tiny_model("dense-1m", vocab_size=len(tok), seed=1).state_dict()
        await pool.load_weights(new, version=5)
        assert pool.version == 5 and all(e.version == 5 for e in engines)
        req = GenerationRequest(
            tok("x = 1")["input_ids"], SamplingParams(max_tokens=4, temperature=1.0, seed=0)
        )
        (out,) = await pool.generate([req])
        assert out.versions == [5] * len(out.token_ids)
    finally:
        await pool.close()


def test_run_engine_config_keeps_the_embedded_settings():
    cfg = RunEngineConfig(backend="embedded", replicas=2, max_batch_size=8, dtype="bfloat16")
    emb = cfg.embedded()
    assert emb.max_batch_size == 8 and emb.dtype == "bfloat16" and not hasattr(emb, "replicas")
