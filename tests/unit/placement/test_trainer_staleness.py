"""Every trainer handle a placement builds re-checks `max_staleness` at the optimizer.

The buffer enforces the bound when the trainer takes groups; the trainer checks it again per
sample, whatever runs it: a worker thread, a child process, two data-parallel ranks or a Ray actor.
Each handle is built the way the run builds it (the placement, from a `RunConfig`), stepped once
to version 1, then given one sample of version 0 and one of version 1 with `max_staleness = 0`:
the old one must be left out (`stale_dropped == 1`).
"""

from __future__ import annotations

import asyncio

import pytest
import torch

from inhabit.orchestrator.config import RunConfig
from inhabit.trainer.samples import Sample


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from inhabit.models.tiny import build_tiny_model, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    model = build_tiny_model("dense-1m", vocab_size=len(tok), seed=0)
    return save_model_folder(model, tok, tmp_path_factory.mktemp("model") / "dense-1m")


def sample(version: int, seed: int) -> Sample:
    g = torch.Generator().manual_seed(seed)
    length = 16
    mask = torch.zeros(length, dtype=torch.bool)
    mask[8:] = True
    return Sample(
        input_ids=torch.randint(10, 500, (length,), generator=g),
        loss_mask=mask,
        behaviour_logprobs=torch.where(mask, -6.0, 0.0),
        versions=torch.where(mask, version, -1),
        advantage=1.0 if seed % 2 else -1.0,
    )


def run_config(model_dir, tmp_path, **update) -> RunConfig:
    data = {
        "model": {"path": str(model_dir)},
        "tasks": {"source": "dir", "dir": str(tmp_path)},
        "run_dir": str(tmp_path / "run"),
        "max_staleness": 0,
        "threads": 1,
        "trainer": {"lr": 1e-4, "micro_batch_tokens": 64},
        **update,
    }
    return RunConfig.model_validate(data)


async def two_steps(handle) -> dict:
    try:
        first = await handle.step([sample(0, 1), sample(0, 2)])
        assert first["stale_dropped"] == 0 and handle.version == 1
        return await handle.step([sample(0, 3), sample(1, 4)])
    finally:
        await handle.close()


@pytest.mark.parametrize(
    "update",
    [
        pytest.param({}, id="thread"),
        pytest.param({"placement": {"trainer": "process"}}, id="process"),
        pytest.param(
            {"trainer": {"lr": 1e-4, "micro_batch_tokens": 64, "data_parallel": 2}},
            id="data-parallel",
            marks=pytest.mark.slow,  # spawns a second rank (imports, gloo): ~20 s on 2 cores
        ),
    ],
)
def test_local_trainer_handles_recheck_staleness(model_dir, tmp_path, update) -> None:
    from inhabit.placement.local import LocalPlacement

    placement = LocalPlacement(run_config(model_dir, tmp_path, **update))
    handle, _ = placement._trainer(model_dir, None)
    second = asyncio.run(two_steps(handle))
    assert second["stale_dropped"] == 1, "the version-0 sample is one version past max_staleness 0"
    assert second["version"] == 2


@pytest.mark.ray
@pytest.mark.slow  # a one-node Ray and a trainer actor: ~30 s on 2 cores
def test_ray_trainer_rechecks_staleness(model_dir, tmp_path) -> None:
    pytest.importorskip("ray")
    from ray_fixtures import ray_run_config, ray_session

    cfg = ray_run_config(model_dir, tmp_path, engines=1, concurrency=1, timeout_s=60)
    cfg = cfg.model_copy(update={"max_staleness": 0, "run_dir": str(tmp_path / "run")})
    cfg.placement.ray.trainer.num_cpus = 0

    async def go(placement) -> dict:
        handle, _ = await placement.start_trainer(model_dir, None)
        return await two_steps(handle)

    with ray_session(cfg, tmp_path / "store") as placement:
        second = asyncio.run(go(placement))
    assert second["stale_dropped"] == 1, "the version-0 sample is one version past max_staleness 0"
