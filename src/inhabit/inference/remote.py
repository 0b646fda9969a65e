"""`RemoteEngine`: the `InferenceEngine` interface over HTTP, against our server, vLLM or SGLang.

Generation always sends token ids (never text) so the prompt the trainer sees is the prompt the
server ran:

- `inhabit` and `vllm`: `POST /v1/completions` with `prompt` = token ids, `logprobs=0` (or
  top_logprobs), `return_token_ids=true`. Both answer `token_ids`, `logprobs.token_logprobs` and,
  for MoE models, vLLM's `routed_experts` (base64 .npy (N-1, layers, k); vLLM needs
  `--enable-return-routed-experts`, which needs a GPU). Our server adds `policy_versions`.
- `sglang`: its native `POST /generate` with `input_ids`, `return_logprob=true`; token ids and
  logprobs come from `meta_info.output_token_logprobs`.

A request's `guide` (constrained decoding, constrained.py) goes as `structured_outputs` to vLLM
and `inhabit serve`, and as `json_schema` / `ebnf` sampling parameters to SGLang.

Weight updates (`load_weights(path_or_state_dict, version)`):
- `inhabit`: `POST /v1/load_weights` (a JSON path, or the state dict uploaded as safetensors).
- `vllm` (server started with `VLLM_SERVER_DEV_MODE=1`): `POST /pause?mode=wait` (in-flight
  requests finish first), `POST /collective_rpc` with `reload_weights(weights_path=...)` (vLLM's
  in-place reload from a checkpoint folder), `POST /reset_prefix_cache` (cached prefixes hold old
  keys), `POST /resume`. A state dict is written to a temporary folder first, so this needs the
  server to share this machine's disk.
- `sglang`: `POST /update_weights_from_disk` with `model_path` (written by us only, untested here:
  no SGLang build runs on this CPU).

Versions: ours reports per-token versions. For vLLM and SGLang the client holds new requests
while a swap is in progress and labels each completion with the version current when it was
sent; with vLLM's pause-and-drain no request spans a swap, so those labels are exact for requests
sent through this client.

Requests run at most `max_concurrency` at a time; transport errors, 429 and 5xx are retried with
exponential backoff; a request that still fails becomes a Completion with finish_reason "error"
(a failed rollout is data); 401/403 raise `RemoteEngineError` (a configuration mistake).
"""

from __future__ import annotations

import asyncio
import logging
import random
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field

from inhabit.config import Config
from inhabit.inference.config import ServerFlavor
from inhabit.inference.engine import Completion, GenerationRequest, InferenceEngine, SamplingParams
from inhabit.inference.errors import RemoteEngineError
from inhabit.inference.protocol import decode_routes

log = logging.getLogger(__name__)


class RemoteConfig(Config):
    """Where the server is and how hard to try."""

    base_url: str = Field(..., description="Server root, e.g. http://127.0.0.1:8000 (no /v1).")
    flavor: ServerFlavor = Field("inhabit", description="Which server speaks.")
    api_key: str | None = Field(None, description="Bearer token, if the server wants one.")
    model: str | None = Field(None, description="Model id; default: the first of GET /v1/models.")
    max_concurrency: int = Field(64, ge=1, le=4096, description="Requests in flight at once.")
    timeout_s: float = Field(600.0, gt=0, description="Per-request timeout (generation can be long).")
    retries: int = Field(3, ge=0, le=20, description="Retries on transport errors, 429 and 5xx.")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay; doubles each retry, with jitter.")
    weight_timeout_s: float = Field(1800.0, gt=0, description="Timeout of one weight update.")


class RemoteEngine(InferenceEngine):
    """An InferenceEngine backed by an OpenAI-compatible server (see module docstring)."""

    def __init__(
        self, config: RemoteConfig, *, version: int = 0, client: httpx.AsyncClient | None = None
    ) -> None:
        self.config = config
        headers = {"authorization": f"Bearer {config.api_key}"} if config.api_key else {}
        self._client = client or httpx.AsyncClient(
            base_url=config.base_url.rstrip("/"), headers=headers, timeout=config.timeout_s
        )
        self._sem: asyncio.Semaphore | None = None
        self._version = version
        self._swap_lock: asyncio.Lock | None = None
        self._active = 0
        self._model = config.model

    @property
    def version(self) -> int:
        return self._version

    # ---------------------------------------------------------------- generation

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        await self._ensure_loop_state()
        if self.config.flavor != "sglang" and self._model is None:
            self._model = await self.first_model()
        return list(await asyncio.gather(*(self._one(r) for r in requests)))

    async def first_model(self) -> str:
        r = await self._request("GET", "/v1/models")
        data = r.json().get("data") or []
        if not data:
            raise RemoteEngineError(f"{self.config.base_url} serves no models")
        return str(data[0]["id"])

    async def _one(self, req: GenerationRequest) -> Completion:
        assert self._sem is not None and self._swap_lock is not None
        async with self._sem:
            async with self._swap_lock:  # no request starts while a swap is in progress
                version = self._version
                self._active += 1
            try:
                if self.config.flavor == "sglang":
                    return await self._sglang(req, version)
                return await self._completions(req, version)
            except RemoteEngineError as e:
                if e.status in (401, 403):
                    raise
                return _failed(req, str(e), version)
            except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
                return _failed(req, f"{type(e).__name__}: {e}", version)
            finally:
                self._active -= 1

    async def _completions(self, req: GenerationRequest, version: int) -> Completion:
        sp = req.sampling
        body: dict[str, Any] = {
            "model": self._model,
            "prompt": list(req.prompt_token_ids),
            **_sampling_fields(sp, max_tokens_key="max_tokens", seed_key="seed"),
            "logprobs": sp.top_logprobs,
            "return_token_ids": True,
            "return_tokens_as_token_ids": bool(sp.top_logprobs),
            "skip_special_tokens": True,
        }
        if sp.guide is not None:  # vLLM's structured outputs (constrained decoding)
            body["structured_outputs"] = sp.guide.wire()
        r = await self._request("POST", "/v1/completions", json=body)
        choice = r.json()["choices"][0]
        ids = [int(t) for t in choice.get("token_ids") or []]
        lp = choice.get("logprobs") or {}
        logprobs = [float(x) if x is not None else float("nan") for x in lp.get("token_logprobs") or []]
        if len(logprobs) != len(ids):
            raise ValueError(f"server returned {len(ids)} token ids but {len(logprobs)} logprobs")
        prompt = choice.get("prompt_token_ids") or list(req.prompt_token_ids)
        prompt_routes, routes = decode_routes(choice.get("routed_experts"), len(prompt))
        versions = choice.get("policy_versions") or [version] * len(ids)
        top = None
        if sp.top_logprobs and lp.get("top_logprobs"):
            top = [{_token_id(k): float(v) for k, v in (d or {}).items()} for d in lp["top_logprobs"]]
        return Completion(
            request_id=req.request_id,
            token_ids=ids,
            logprobs=logprobs,
            versions=[int(v) for v in versions],
            finish_reason=_finish(choice.get("finish_reason")),
            text=choice.get("text") or "",
            routed_experts=routes,
            prompt_token_ids=list(prompt),
            prompt_routed_experts=prompt_routes,
            top_logprobs=top,
        )

    async def _sglang(self, req: GenerationRequest, version: int) -> Completion:
        sp = req.sampling
        params = _sampling_fields(sp, max_tokens_key="max_new_tokens", seed_key="sampling_seed")
        if sp.guide is not None:
            params |= sp.guide.sglang()
        body = {"input_ids": list(req.prompt_token_ids), "sampling_params": params, "return_logprob": True}
        out = (await self._request("POST", "/generate", json=body)).json()
        meta = out.get("meta_info") or {}
        pairs = meta.get("output_token_logprobs") or []
        ids = [int(p[1]) for p in pairs] or [int(t) for t in out.get("output_ids") or []]
        logprobs = [float(p[0]) for p in pairs]
        reason = meta.get("finish_reason")
        reason = reason.get("type") if isinstance(reason, dict) else reason
        return Completion(
            request_id=req.request_id,
            token_ids=ids,
            logprobs=logprobs,
            versions=[version] * len(ids),
            finish_reason=_finish(reason),
            text=out.get("text") or "",
            prompt_token_ids=list(req.prompt_token_ids),
        )

    # ---------------------------------------------------------------- weights

    async def load_weights(self, weights: Mapping[str, Any] | str | Path, version: int) -> None:
        await self._ensure_loop_state()
        assert self._swap_lock is not None
        async with self._swap_lock:
            if self.config.flavor == "inhabit":
                await self._load_inhabit(weights, version)
            else:
                with tempfile.TemporaryDirectory(prefix="inhabit-weights-") as tmp:
                    path = str(weights) if isinstance(weights, str | Path) else _write_folder(weights, tmp)
                    if self.config.flavor == "vllm":
                        await self._load_vllm(path)
                    else:
                        await self._load_sglang(path)
            self._version = int(version)

    async def _load_inhabit(self, weights: Mapping[str, Any] | str | Path, version: int) -> None:
        t = self.config.weight_timeout_s
        if isinstance(weights, str | Path):
            await self._request(
                "POST", "/v1/load_weights", json={"path": str(weights), "version": version}, timeout=t
            )
            return
        from safetensors.torch import save

        data = save({k: v.contiguous() for k, v in weights.items()})
        await self._request(
            "POST",
            f"/v1/load_weights?version={version}",
            content=data,
            headers={"content-type": "application/octet-stream"},
            timeout=t,
        )

    async def _load_vllm(self, path: str) -> None:
        t = self.config.weight_timeout_s
        await self._request("POST", "/pause", params={"mode": "wait"}, timeout=t)
        try:
            await self._request(
                "POST",
                "/collective_rpc",
                json={"method": "reload_weights", "kwargs": {"weights_path": path}},
                timeout=t,
            )
            await self._request("POST", "/reset_prefix_cache", timeout=t)
        finally:
            await self._request("POST", "/resume", timeout=t)

    async def _load_sglang(self, path: str) -> None:
        r = await self._request(
            "POST",
            "/update_weights_from_disk",
            json={"model_path": path},
            timeout=self.config.weight_timeout_s,
        )
        body = r.json()
        if isinstance(body, dict) and body.get("success") is False:
            raise RemoteEngineError(f"SGLang refused the weights: {body.get('message')}")

    async def drained(self) -> asyncio.Lock:
        """Hold new requests and wait until none is in flight; returns the held lock (release it)."""
        await self._ensure_loop_state()
        assert self._swap_lock is not None
        await self._swap_lock.acquire()
        while self._active:
            await asyncio.sleep(0.02)
        return self._swap_lock

    def rebase(self, base_url: str) -> None:
        """Point at another server (after a restart); the old connection pool is dropped."""
        old = self._client
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=old.headers, timeout=old.timeout
        )
        self._old_clients = [*getattr(self, "_old_clients", []), old]

    def set_version(self, version: int) -> None:
        self._version = int(version)

    def set_model(self, name: str) -> None:
        """Address later requests to another model id of the server (a LoRA adapter's name)."""
        self._model = name

    @property
    def model(self) -> str | None:
        """The model id requests are addressed to."""
        return self._model

    async def post_control(self, url: str, body: dict[str, Any]) -> httpx.Response:
        """POST a JSON body to a control endpoint of the server (weights timeout, retries)."""
        return await self._request("POST", url, json=body, timeout=self.config.weight_timeout_s)

    # ---------------------------------------------------------------- plumbing

    async def _ensure_loop_state(self) -> None:
        # Locks and semaphores bind to the loop that first uses them.
        if self._sem is None:
            self._sem = asyncio.Semaphore(self.config.max_concurrency)
            self._swap_lock = asyncio.Lock()

    async def _request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        delay = self.config.backoff_s
        for attempt in range(self.config.retries + 1):
            try:
                r = await self._client.request(method, url, **kw)
            except httpx.TransportError as e:
                if attempt == self.config.retries:
                    raise RemoteEngineError(f"{method} {url} failed: {type(e).__name__}: {e}") from e
            else:
                if r.status_code < 400:
                    return r
                if (r.status_code != 429 and r.status_code < 500) or attempt == self.config.retries:
                    raise RemoteEngineError(
                        f"{method} {url} -> {r.status_code}: {_message(r)}", r.status_code
                    )
            await asyncio.sleep(delay * (1 + random.random() * 0.25))
            delay *= 2
        raise AssertionError("unreachable")

    async def close(self) -> None:
        for c in [*getattr(self, "_old_clients", []), self._client]:
            await c.aclose()


def _message(r: httpx.Response) -> str:
    try:
        body = r.json()
        err = body.get("error") if isinstance(body, dict) else None
        if isinstance(err, dict):
            return str(err.get("message"))
        return str(body.get("detail") or body.get("message") or body)[:500]
    except ValueError:
        return r.text[:500]


def _finish(reason: Any) -> Any:
    return reason if reason in ("stop", "length", "abort") else ("stop" if reason is None else "error")


def _token_id(key: str) -> int:
    # vLLM's return_tokens_as_token_ids form is "token_id:123"; otherwise keys are token strings,
    # which cannot be mapped back without the tokenizer: keep -1.
    return int(key.split(":", 1)[1]) if key.startswith("token_id:") else -1


def _failed(req: GenerationRequest, error: str, version: int) -> Completion:
    log.warning("remote request %s failed: %s", req.request_id, error)
    return Completion(
        request_id=req.request_id,
        token_ids=[],
        logprobs=[],
        versions=[],
        finish_reason="error",
        prompt_token_ids=list(req.prompt_token_ids),
        error=error,
    )


def _write_folder(weights: Mapping[str, Any], folder: str) -> str:
    from safetensors.torch import save_file

    save_file({k: v.contiguous() for k, v in weights.items()}, str(Path(folder) / "model.safetensors"))
    return folder


def _sampling_fields(sp: SamplingParams, *, max_tokens_key: str, seed_key: str) -> dict[str, Any]:
    """`sp` as request fields. OpenAI's completions body (vLLM, `inhabit serve`) and SGLang's
    `sampling_params` share every name but two: the token budget and the seed. Penalties and logit
    bias go only when set."""
    out: dict[str, Any] = {"temperature": sp.temperature, "top_p": sp.top_p, max_tokens_key: sp.max_tokens}
    if sp.stop:
        out["stop"] = list(sp.stop)
    if sp.stop_token_ids:
        out["stop_token_ids"] = list(sp.stop_token_ids)
    if sp.seed is not None:
        out[seed_key] = sp.seed
    if sp.presence_penalty:
        out["presence_penalty"] = sp.presence_penalty
    if sp.frequency_penalty:
        out["frequency_penalty"] = sp.frequency_penalty
    if sp.logit_bias:
        out["logit_bias"] = {str(t): b for t, b in sp.logit_bias}
    return out
