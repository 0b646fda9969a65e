"""Engine backend "vllm": `replicas` `vllm serve` subprocesses (`inhabit.inference.vllm_backend`)
behind a `ReplicaSet`, started from the `[engine.vllm]` table (`VLLMOptions`).

A replica whose process died is started again on the newest weights, at most `max_restarts`
times. vLLM runs from its own virtualenv: on this CPU `scripts/setup-vllm.sh` makes
`.venv-vllm`; on GPUs point `engine.vllm.venv` (or `command`) at the user's install.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from inhabit.errors import ConfigError
from inhabit.inference.engine import InferenceEngine
from inhabit.placement.engine_backends import ReplicaSet, RunEngineConfig, urls_unused

SETUP_HINT = "run scripts/setup-vllm.sh (it creates .venv-vllm), or set engine.vllm.venv to your vLLM install"


def _max_model_len(cfg: RunEngineConfig, model_dir: Path) -> int:
    if cfg.max_model_len is not None:
        return cfg.max_model_len
    from inhabit.models.loading import check_model_folder

    config = check_model_folder(model_dir)  # ModelLoadError naming what is wrong with the folder
    text = config.get("text_config") or config
    return int(text.get("max_position_embeddings", 2048))


class VLLMBackend:
    def problem(self, cfg: RunEngineConfig) -> str | None:
        return urls_unused(cfg)

    def check(self, cfg: RunEngineConfig) -> None:
        if cfg.vllm.command is not None:
            return
        from inhabit.inference.vllm_backend import find_vllm_venv

        if find_vllm_venv(cfg.vllm.venv) is None:
            where = cfg.vllm.venv or "$INHABIT_VLLM_VENV or ./.venv-vllm"
            raise ConfigError(
                f"engine.backend = 'vllm' but no vLLM install was found at {where}: {SETUP_HINT}"
            )

    def describe(self, cfg: RunEngineConfig) -> str:
        from inhabit.inference.vllm_backend import find_vllm_venv

        o = cfg.vllm
        venv = find_vllm_venv(o.venv)
        where = (
            " ".join(o.command)
            if o.command
            else (str(venv) if venv else "NOT FOUND: run scripts/setup-vllm.sh")
        )
        return f"{cfg.replicas} x `vllm serve` ({where}), dtype {o.dtype}, full weight reload per version"

    async def start(
        self, cfg: RunEngineConfig, model_dir: Path, *, version: int, log_dir: Path
    ) -> InferenceEngine:
        from inhabit.inference.vllm_backend import VLLMConfig, VLLMEngine

        log_dir.mkdir(parents=True, exist_ok=True)
        o = cfg.vllm
        configs = [
            VLLMConfig(
                model=str(model_dir),
                venv=o.venv,
                command=o.command,
                dtype=o.dtype,
                max_model_len=_max_model_len(cfg, model_dir),
                kv_cache_gib=o.kv_cache_gib,
                routed_experts=o.routed_experts,
                extra_args=o.extra_args,
                reload=o.reload,
                batch_invariant=cfg.deterministic,  # vLLM's own batch-invariant kernels (GPU builds)
                env={"CUDA_VISIBLE_DEVICES": o.devices[i]} if o.devices else {},
                startup_timeout_s=o.startup_timeout_s,
                log_file=str(log_dir / f"vllm-{i}.log"),
            )
            for i in range(cfg.replicas)
        ]
        started = await asyncio.gather(
            *(VLLMEngine.start(c, version=version) for c in configs), return_exceptions=True
        )
        failed = [e for e in started if isinstance(e, BaseException)]
        if failed:
            await asyncio.gather(*(e.close() for e in started if not isinstance(e, BaseException)))
            raise failed[0]
        return ReplicaSet(started, restartable=True, max_restarts=cfg.max_restarts)  # type: ignore[arg-type]


BACKEND = VLLMBackend()
