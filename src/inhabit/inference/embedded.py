"""The embedded engine: continuous batching of a transformers model in this process, on CPU by default.

One decode worker (a dedicated thread) owns the model and runs the step loop; `generate` and
`stream` only enqueue requests and await futures, so torch never blocks the event loop and any
number of coroutines (or event loops) can share one engine. Each loop iteration:

1. applies pending weight swaps (so a swap lands between steps, never inside one),
2. admits waiting requests up to `max_batch_size` and prefills their prompts (left-padded, in
   batches of similar lengths capped by `prefill_token_budget`: prefill_plan.py), sampling each
   one's first token,
3. runs one decode step over every running request (one token each; see kv_cache.py),
4. retires finished requests (their slots go to others) and resolves their futures.

Per sampled token the engine records its logprob (see sampling.py for which distribution), the
policy version of the weights whose forward produced its logits, and for MoE models the expert
ids every layer routed that forward's input position to (the position that produced the token:
completion token i's routes are those of input position len(prompt)+i-1; the prompt's other
positions are in `Completion.prompt_routed_experts`). Concatenating the two gives the routes of
positions 0..N-2 of prompt+completion, which is what a full-sequence forward needs to replay
(the last position's logits are never used).

KV cache after a swap (`EngineConfig.kv_after_swap`): "recompute" (default) re-prefills every
running request's prefix with the new weights before the next step, so every token sampled after
the swap is exactly what a full forward of the new weights gives for its prefix; "keep" reuses
the stale cache (cheaper, like in-flight updates elsewhere; the recorded logprob is still the
true sampling probability). Routes of prompt positions stay those of the first prefill.

Deterministic mode (`EngineConfig.deterministic`): prefill, decode and the post-swap recompute
run through the batch-invariant forward of models/invariant.py instead of the model's own, writing
keys and values straight into the slot cache; prompts are prefilled as rows in chunks of
`prefill_token_budget` tokens (a prompt may span chunks), without padding. Each request's tokens
and logprobs then depend on nothing but its own prompt, sampling parameters, seed and weights.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from inhabit.inference.config import EngineConfig
from inhabit.inference.constrained import GrammarCompiler, TokenMask
from inhabit.inference.engine import Completion, GenerationRequest, InferenceEngine
from inhabit.inference.errors import EngineClosed, EngineOverloaded, InvalidRequest
from inhabit.inference.kv_cache import ExtendCache, PrefixCache, PrefixEntry, SlotKVCache, prefill_mask
from inhabit.inference.prefill_plan import plan_prefill
from inhabit.inference.sampling import RowSampling, make_generator, sample_tokens
from inhabit.inference.stops import StopChecker, completion_text
from inhabit.inference.weights_io import copy_into, read_state_dict, to_model_layout

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass(frozen=True)
class TokenEvent:
    """One sampled token, as `EmbeddedEngine.stream` yields it before the final Completion."""

    request_id: str
    token_id: int
    logprob: float
    version: int
    routed_experts: list[list[int]] | None = None
    top_logprobs: dict[int, float] | None = None  # when the request asked for top_logprobs


@dataclass
class _Seq:
    """A request in flight (owned by the worker thread once admitted)."""

    req: GenerationRequest
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future
    on_event: Callable[[TokenEvent], None] | None
    generator: torch.Generator
    stop_ids: frozenset[int]
    stops: StopChecker | None
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    versions: list[int] = field(default_factory=list)
    routes: list[list[list[int]]] = field(default_factory=list)
    prompt_routes: list[list[list[int]]] | None = None
    top: list[dict[int, float]] = field(default_factory=list)
    cancelled: bool = False
    row: RowSampling | None = None  # its sampling settings, made once (see _row)
    mask: TokenMask | None = None  # its grammar's state when the request is constrained
    submitted: float = field(default_factory=time.monotonic)  # for the finish hooks' latencies
    first_token_at: float | None = None
    finish: str | None = None
    order: int = -1  # admission order (first admission): the newest is preempted first
    kv_stale: bool = False  # its KV holds keys of weights swapped out since ("keep" mode)


class StreamHandle:
    """One admitted streaming request: iterate for its events; `cancel()` frees its batch slot."""

    def __init__(self, seq: _Seq, queue: asyncio.Queue[TokenEvent]) -> None:
        self._seq, self._queue = seq, queue

    async def __aiter__(self) -> AsyncIterator[TokenEvent | Completion]:
        seq, queue = self._seq, self._queue
        while True:
            get = asyncio.ensure_future(queue.get())
            try:
                done, _ = await asyncio.wait({get, seq.future}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not get.done():
                    get.cancel()
            if get in done:
                yield get.result()
                continue
            while not queue.empty():  # tokens that raced the final result
                yield queue.get_nowait()
            yield seq.future.result()
            return

    def cancel(self) -> None:
        """Abort the request if it is still running (the worker retires it at its next step)."""
        if not self._seq.future.done():
            self._seq.cancelled = True


@dataclass
class _Swap:
    state: dict[str, torch.Tensor]
    version: int
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future


def cache_keyword(model: Any) -> str:
    """The keyword a model's forward takes its KV cache by: `cache` where transformers has renamed
    it (newer 5.x, which warn on the old name), `past_key_values` in the releases before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


class EmbeddedEngine(InferenceEngine):
    """Continuous-batching engine over a transformers causal LM (see module docstring)."""

    def __init__(
        self, model: Any, tokenizer: Any = None, config: EngineConfig | None = None, version: int = 0
    ) -> None:
        from inhabit.inference.precision import choose_dtype, model_parameters

        config = config or EngineConfig()
        self.dtype_choice = choose_dtype(
            config.dtype,
            device=config.device,
            parameters=model_parameters(model),
            deterministic=config.deterministic,
        )
        # The resolved dtype replaces `auto`, so every later `config.dtype` is a real dtype.
        self.config = config.model_copy(update={"dtype": self.dtype_choice.name})
        self.tokenizer = tokenizer
        self.model = model.to(device=self.config.device, dtype=_DTYPES[self.config.dtype]).eval()
        self._cache_kw = cache_keyword(self.model)
        mc = model.config.get_text_config(decoder=True)
        self.max_model_len = self.config.max_model_len or int(getattr(mc, "max_position_embeddings", 4096))
        head_dim = getattr(mc, "head_dim", None) or mc.hidden_size // mc.num_attention_heads
        self._kv = SlotKVCache(
            num_layers=mc.num_hidden_layers,
            num_kv_heads=mc.num_key_value_heads,
            head_dim=head_dim,
            max_slots=self.config.max_batch_size,
            max_len=self.max_model_len,
            dtype=_DTYPES[self.config.dtype],
            device=self.config.device,
        )
        # The KV budget also caps one row: a request never holds more positions than fit in it.
        self.kv_budget = int(self.config.kv_cache_gb * 2**30)
        self._kv.max_len = min(self.max_model_len, self.kv_budget // self._kv.token_bytes)
        self.vocab_size = int(mc.vocab_size)
        self.eos_ids = _eos_ids(model) or frozenset(
            [tokenizer.eos_token_id] if tokenizer is not None and tokenizer.eos_token_id is not None else []
        )
        self._version = version
        self._fallback_gen = torch.Generator().manual_seed(
            self.config.seed if self.config.seed is not None else int(time.time_ns() % 2**62)
        )
        self._inv = None
        if self.config.deterministic:
            from inhabit.models.invariant import InvariantForward
            from inhabit.models.routing import is_moe

            # Batch-invariant kernels replace the model's own forward (models/invariant.py); they
            # return routes themselves, so no router hook is needed.
            self._inv = InvariantForward(self.model, _DTYPES[self.config.dtype])
            self._capture = None
            self.is_moe = is_moe(self.model) and self.config.capture_routing
        else:
            self._capture = _make_capture(model) if self.config.capture_routing else None
            self.is_moe = self._capture is not None
        self._lean = None
        if self.config.lean_decode and self._inv is None:
            from inhabit.inference import lean_decode

            if lean_decode.supports(self.model):
                self._lean = lean_decode.LeanDecode(self.model)
        # Prefix reuse would leave cached prompt positions without recorded routes: off for MoE.
        self._prefix = PrefixCache() if self.config.prefix_cache and not self.is_moe else None
        self.prompt_tokens = 0  # prompt tokens of admitted requests
        self.cached_prompt_tokens = 0  # ... of which were served from the prefix cache
        self.prefilled_tokens = 0  # prompt positions computed by prefill forwards (padding not counted)
        self.preemptions = 0
        self.peak_kv_bytes = 0  # most bytes the slot buffers and the prefix cache held together
        self._admissions = 0
        self._lock = threading.Condition()
        self._waiting: collections.deque[_Seq] = collections.deque()
        self._running: list[_Seq] = []
        self._swaps: list[_Swap] = []
        self._in_flight = 0
        self._closing = False
        self._dead: BaseException | None = None
        self.last_swap_seconds: float | None = None
        self._grammar_compilers: dict[frozenset[int], GrammarCompiler] = {}  # by stop ids
        # Called on the worker thread as each request ends: (completion, submitted, first token at,
        # finished at), monotonic seconds; the server's /metrics observes latencies through it.
        self.finish_hooks: list[Callable[[Completion, float, float | None, float], None]] = []
        self.steps = 0
        self.decoded_rows = 0  # sequences summed over decode steps: rows / steps = mean decode batch
        self._thread = threading.Thread(target=self._worker, name="inhabit-decode", daemon=True)
        self._thread.start()

    # ---------------------------------------------------------------- construction

    @classmethod
    def from_path(
        cls, path: str | Path, config: EngineConfig | None = None, version: int = 0
    ) -> EmbeddedEngine:
        """Load a local Hugging Face folder (model + tokenizer) and start an engine on it."""
        from inhabit.inference.precision import choose_dtype, folder_parameters
        from inhabit.models.loading import load_model

        config = config or EngineConfig()
        # Load straight into the dtype `auto` resolves to (the engine resolves it again from the
        # loaded model, to the same answer), not fp32 first.
        dtype = choose_dtype(
            config.dtype,
            device=config.device,
            parameters=folder_parameters(path),
            deterministic=config.deterministic,
        ).name
        model, tokenizer = load_model(path, dtype=dtype, device=config.device)
        return cls(model, tokenizer, config, version=version)

    # ---------------------------------------------------------------- public API

    @property
    def version(self) -> int:
        return self._version

    @property
    def num_running(self) -> int:
        return len(self._running)

    async def generate(self, requests: Sequence[GenerationRequest]) -> list[Completion]:
        seqs = self._submit(requests, None)
        try:
            return list(await asyncio.gather(*(s.future for s in seqs)))
        except asyncio.CancelledError:
            for s in seqs:
                s.cancelled = True
            raise

    async def stream(self, request: GenerationRequest) -> AsyncIterator[TokenEvent | Completion]:
        """Yield a TokenEvent per sampled token, then the final Completion."""
        handle = self.open_stream(request)
        try:
            async for ev in handle:
                yield ev
        finally:
            handle.cancel()

    def open_stream(self, request: GenerationRequest) -> StreamHandle:
        """Admit `request` now and return its events (a server decides 429 before any byte).

        Typed errors (EngineOverloaded, InvalidRequest, EngineClosed) raise here; the caller
        must `cancel()` the handle when it stops reading, or the request runs to its end.
        """
        return self.open_streams([request])[0]

    def open_streams(self, requests: Sequence[GenerationRequest]) -> list[StreamHandle]:
        """`open_stream` for several requests admitted together: all of them, or none (typed error)."""
        loop = asyncio.get_running_loop()
        reqs = [r if r.request_id else replace(r, request_id=uuid.uuid4().hex) for r in requests]
        queues: dict[str, asyncio.Queue[TokenEvent]] = {r.request_id: asyncio.Queue() for r in reqs}
        if len(queues) != len(reqs):
            raise InvalidRequest("open_streams: two requests share a request_id")
        seqs = self._submit(reqs, lambda ev: loop.call_soon_threadsafe(queues[ev.request_id].put_nowait, ev))
        return [StreamHandle(seq, queues[seq.req.request_id]) for seq in seqs]

    async def load_weights(self, weights: Mapping[str, torch.Tensor] | str | Path, version: int) -> None:
        """Swap weights between decode steps; returns once the new weights are in use."""
        if isinstance(weights, str | Path):
            state = await asyncio.to_thread(read_state_dict, weights)
        else:
            state = dict(weights)
        state = await asyncio.to_thread(to_model_layout, self.model, state)
        loop = asyncio.get_running_loop()
        swap = _Swap(state, int(version), loop, loop.create_future())
        with self._lock:
            self._check_alive()
            self._swaps.append(swap)
            self._lock.notify()
        await swap.future

    def begin_close(self) -> None:
        """Stop taking requests; the worker fails those in flight with EngineClosed (signal-safe)."""
        with self._lock:
            self._closing = True
            self._lock.notify()

    def close_blocking(self, timeout_s: float = 30) -> None:
        """Stop and wait for the decode worker, outside an event loop (a refusal before serving).

        Leaving the process while the worker is still inside torch (its first
        `torch.set_num_threads`, a forward pass) aborts it at exit ("terminate called without an
        active exception") instead of exiting with the refusal's own status.
        """
        self.begin_close()
        self._thread.join(timeout_s)

    async def close(self) -> None:
        self.begin_close()
        await asyncio.to_thread(self._thread.join, 30)
        if self.prompt_tokens:
            log.info(
                "KV cache: peak %.2f GB of engine.kv_cache_gb=%g; prefix cache served %d of %d prompt "
                "tokens (%.0f%%); %d preemptions",
                self.peak_kv_bytes / 1e9,
                self.config.kv_cache_gb,
                self.cached_prompt_tokens,
                self.prompt_tokens,
                100 * self.prefix_hit_share(),
                self.preemptions,
            )

    def decode_counts(self) -> tuple[int, int]:
        return self.steps, self.decoded_rows

    def stats(self) -> dict[str, Any]:
        """Counters for /metrics-style reporting."""
        return {
            "version": self._version,
            "running": len(self._running),
            "waiting": len(self._waiting),
            "steps": self.steps,
            "decoded_rows": self.decoded_rows,
            "last_swap_seconds": self.last_swap_seconds,
            "kv_tokens": sum(self._kv.lengths[: len(self._running)]),
            "kv_capacity_tokens": self.kv_budget // self._kv.token_bytes,
            "kv_bytes": self._kv.nbytes,
            "kv_budget_bytes": self.kv_budget,
            "prefix_cache_bytes": self._prefix.nbytes if self._prefix is not None else 0,
            "prefix_cache_entries": len(self._prefix) if self._prefix is not None else 0,
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "prefilled_tokens": self.prefilled_tokens,
            "preemptions": self.preemptions,
            "peak_kv_bytes": self.peak_kv_bytes,
        }

    def prefix_hit_share(self) -> float:
        """Share of admitted prompt tokens whose KV came from the prefix cache (0 before any)."""
        return self.cached_prompt_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    # ---------------------------------------------------------------- submission

    def _submit(
        self, requests: Sequence[GenerationRequest], on_event: Callable[[TokenEvent], None] | None
    ) -> list[_Seq]:
        """Validate and enqueue all of `requests`, or none of them (typed error)."""
        loop = asyncio.get_running_loop()
        seqs = []
        for req in requests:
            self._validate(req)
            sp = req.sampling
            stop_ids = frozenset(sp.stop_token_ids) | (
                self.eos_ids if self.config.stop_at_eos else frozenset()
            )
            if not req.request_id:
                req = GenerationRequest(req.prompt_token_ids, req.sampling, request_id=uuid.uuid4().hex)
            seqs.append(
                _Seq(
                    req=req,
                    loop=loop,
                    future=loop.create_future(),
                    on_event=on_event,
                    generator=make_generator(sp.seed, self._fallback_gen),
                    stop_ids=stop_ids,
                    stops=StopChecker(self.tokenizer, sp.stop) if sp.stop else None,
                    # The grammar ends on a stop token: the engine's own when it does not stop at EOS.
                    mask=None
                    if sp.guide is None
                    else self._grammars(stop_ids or self.eos_ids).matcher(sp.guide),
                )
            )
        with self._lock:
            self._check_alive()
            if self._in_flight + len(seqs) > self.config.max_queue:
                raise EngineOverloaded(
                    f"{self._in_flight} requests are in flight and {len(seqs)} more were asked "
                    f"(max_queue={self.config.max_queue}); retry later or raise max_queue"
                )
            self._in_flight += len(seqs)
            self._waiting.extend(seqs)
            self._lock.notify()
        return seqs

    def _validate(self, req: GenerationRequest) -> None:
        sp, n = req.sampling, len(req.prompt_token_ids)
        if n == 0:
            raise InvalidRequest("the prompt is empty: give at least one token")
        if n >= self.max_model_len:
            raise InvalidRequest(
                f"the prompt has {n} tokens but the context is {self.max_model_len}; shorten it"
            )
        if n >= self._kv.max_len:
            raise InvalidRequest(
                f"the prompt has {n} tokens, whose KV cache ({(n + 1) * self._kv.token_bytes / 2**30:.2f} "
                f"GiB) exceeds engine.kv_cache_gb={self.config.kv_cache_gb:g}; raise it or shorten the prompt"
            )
        if any(not 0 <= t < self.vocab_size for t in req.prompt_token_ids):
            raise InvalidRequest(f"prompt token ids must lie in [0, {self.vocab_size})")
        if sp.max_tokens < 1:
            raise InvalidRequest("max_tokens must be at least 1")
        if sp.temperature < 0 or not 0 < sp.top_p <= 1:
            raise InvalidRequest("temperature must be >= 0 and top_p in (0, 1]")
        if not 0 <= sp.top_logprobs <= 20:
            raise InvalidRequest("top_logprobs must lie in [0, 20]")
        if any(not 0 <= t < self.vocab_size for t, _ in sp.logit_bias):
            raise InvalidRequest(f"logit_bias token ids must lie in [0, {self.vocab_size})")
        if sp.stop and self.tokenizer is None:
            raise InvalidRequest("stop strings need a tokenizer; this engine was built without one")

    def _grammars(self, stop_ids: frozenset[int]) -> GrammarCompiler:
        """The grammar compiler of this engine for these stop tokens (made on first use)."""
        if self.tokenizer is None:
            raise InvalidRequest("constrained decoding needs a tokenizer; this engine was built without one")
        if stop_ids not in self._grammar_compilers:
            self._grammar_compilers[stop_ids] = GrammarCompiler(self.tokenizer, self.vocab_size, stop_ids)
        return self._grammar_compilers[stop_ids]

    def _check_alive(self) -> None:
        if self._closing:
            raise EngineClosed("the engine is closed")
        if self._dead is not None:
            raise EngineClosed(f"the engine's decode worker died: {self._dead!r}")

    # ---------------------------------------------------------------- worker thread

    def _worker(self) -> None:
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)
        try:
            with torch.inference_mode(), self._capture or contextlib.nullcontext():
                while self._iteration():
                    pass
        except BaseException as e:  # the worker must never die silently
            log.exception("decode worker died")
            self._dead = e
        finally:
            self._fail_all(EngineClosed("the engine closed before this request finished"))

    def _iteration(self) -> bool:
        with self._lock:
            while not (self._waiting or self._running or self._swaps or self._closing):
                self._lock.wait()
            if self._closing:
                return False
            swaps, self._swaps = self._swaps, []
            admitted = self._take_admissible()
        for swap in swaps:
            self._apply_swap(swap)
        self._retire([i for i, s in enumerate(self._running) if s.cancelled], "abort")
        admitted = [s for s in admitted if not self._cancelled_before_start(s)]
        try:
            if admitted:
                self._admit(admitted)
            if self._running:
                self._decode_step()
        except Exception as e:  # a bad batch fails its requests, not the engine
            log.exception("engine step failed")
            for s in admitted:
                if s not in self._running and not s.future.done():
                    self._resolve(s, "error", error=repr(e))
            self._retire(list(range(len(self._running))), "error", error=repr(e))
        return True

    def _take_admissible(self) -> list[_Seq]:
        """Waiting requests (oldest first, the lock held) that fit the batch limit and the KV budget
        beside the running ones; the first always fits an empty batch (`_validate` checked it)."""
        rows = len(self._running)
        length = self._kv.needed_length(rows) if rows else 0
        out: list[_Seq] = []
        while self._waiting and rows + len(out) < self.config.max_batch_size:
            s = self._waiting[0]
            need = max(length, _kv_length(s) + 1)
            if rows + len(out) and self._kv.bytes_for(rows + len(out) + 1, need) > self.kv_budget:
                break  # it waits for running requests to finish
            out.append(self._waiting.popleft())
            length = need
        return out

    def _make_room(self, rows: int, length: int, keep: Sequence[PrefixEntry] = ()) -> None:
        """Evict cached prefixes (least recently used first, not `keep`) until `rows` rows of `length`
        positions fit the budget beside the rest, then size the slot buffers to that."""
        need = self._kv.bytes_for(rows, length)
        while self._prefix is not None and self._prefix.nbytes + need > self.kv_budget:
            if not self._prefix.evict_one(keep):
                break
        held = self._prefix.nbytes if self._prefix is not None else 0
        self._kv.ensure(rows, length, max_bytes=self.kv_budget - held)
        if self._prefix is not None and self._prefix.nbytes + self._kv.nbytes > self.kv_budget:
            self._kv.resize(rows, self._kv.rounded(length))  # drop the slack `ensure` keeps
        self._note_kv_bytes()

    def _note_kv_bytes(self) -> None:
        held = self._kv.nbytes + (self._prefix.nbytes if self._prefix is not None else 0)
        self.peak_kv_bytes = max(self.peak_kv_bytes, held)

    def _fit_decode(self) -> None:
        """Room for the next decode step: running rows grow by a token each, and past the budget the
        newest request goes back to the front of the queue (its KV is recomputed when it resumes)."""
        while len(self._running) > 1:
            n = len(self._running)
            if self._kv.bytes_for(n, self._kv.needed_length(n)) <= self.kv_budget:
                break
            row = max(range(n), key=lambda i: self._running[i].order)
            s = self._remove_row(row)
            self.preemptions += 1
            with self._lock:
                self._waiting.appendleft(s)
        n = len(self._running)
        self._make_room(n, self._kv.needed_length(n))

    def _cancelled_before_start(self, s: _Seq) -> bool:
        if s.cancelled:
            self._resolve(s, "abort")
        return s.cancelled

    # ---------------------------------------------------------------- model calls

    def _prefill(
        self, slots: list[int], sequences: list[list[int]], starts: list[int]
    ) -> list[tuple[torch.Tensor, Any]]:
        """Fill KV `slots` with `sequences`, whose first `starts` positions are there already; per
        sequence (last logits, routes (L, T, k) of the positions computed, or None). Sequences
        from scratch go through left-padded batches (each written into its slots before the next
        batch runs, so at most one batch's KV is held twice), the others one by one."""
        results: list[Any] = [None] * len(sequences)
        cold = [j for j, start in enumerate(starts) if start == 0]
        for j, start in enumerate(starts):
            if start:
                results[j] = self._extend(slots[j], sequences[j], start)
        chunks = plan_prefill([len(sequences[j]) for j in cold], self.config.prefill_token_budget)
        for chunk in chunks:
            batch = [cold[i] for i in chunk]
            for j, (logits, kv, routes) in zip(
                batch, self._prefill_batch([sequences[j] for j in batch]), strict=True
            ):
                self._kv.write_prefix(slots[j], kv)
                results[j] = (logits, routes)
        return results

    def _extend(self, slot: int, seq: list[int], start: int) -> tuple[torch.Tensor, Any]:
        """Forward positions start.. of `seq` in `slot`, attending to the keys before them there."""
        dev = self.config.device
        cache = ExtendCache(self._kv, slot, start, len(seq) - start)
        out = self.model(
            input_ids=torch.tensor([seq[start:]], device=dev),
            attention_mask=cache.attention_mask(_DTYPES[self.config.dtype], dev),
            position_ids=cache.position_ids(dev),
            **{self._cache_kw: cache},
            use_cache=True,
            logits_to_keep=1,
        )
        self._kv.lengths[slot] = len(seq)
        self.prefilled_tokens += len(seq) - start
        routes = self._take_routes()  # (L, 1, T, k) or None
        return out.logits[0, -1], None if routes is None else routes[:, 0]

    def _prefill_batch(self, seqs: list[list[int]]) -> list[tuple[torch.Tensor, list, Any]]:
        from transformers import DynamicCache

        dev = self.config.device
        total = max(len(s) for s in seqs)
        pads = [total - len(s) for s in seqs]
        ids = torch.tensor([[0] * p + s for p, s in zip(pads, seqs, strict=True)], device=dev)
        pos = (torch.arange(total)[None, :] - torch.tensor(pads)[:, None]).clamp(min=0).to(dev)
        mask = prefill_mask(pads, total, _DTYPES[self.config.dtype], dev)
        cache = DynamicCache(config=self.model.config)
        self.prefilled_tokens += sum(len(s) for s in seqs)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=pos,
            **{self._cache_kw: cache},
            use_cache=True,
            logits_to_keep=1,
        )
        routes = self._take_routes()  # (L, b, T, k) or None
        res = []
        for b, p in enumerate(pads):
            kv = [(layer.keys[b, :, p:], layer.values[b, :, p:]) for layer in cache.layers]
            res.append((out.logits[b, -1], kv, None if routes is None else routes[:, b, p:]))
        return res

    def _take_routes(self) -> torch.Tensor | None:
        if self._capture is None:
            return None
        calls = self._capture.clear()
        return calls[-1] if calls else None

    def _det_prefill(
        self, slots: list[int], sequences: list[list[int]], starts: list[int]
    ) -> list[tuple[torch.Tensor, Any]]:
        """Deterministic mode: prefill positions starts[j].. of `sequences` into KV `slots` with the
        batch-invariant forward, as rows in chunks of at most `prefill_token_budget` tokens (a
        prompt may span chunks: its later rows attend to the keys its earlier chunk wrote). Per
        sequence (last logits, routes (L, T, k) of the positions computed, or None)."""
        assert self._inv is not None
        self._kv.reserve(max(len(s) for s in sequences), max(slots) + 1)
        rows = [(j, p) for j, seq in enumerate(sequences) for p in range(starts[j], len(seq))]
        logits: dict[int, torch.Tensor] = {}
        routes: dict[int, list[torch.Tensor]] = {j: [] for j in range(len(sequences))}
        budget = self.config.prefill_token_budget
        self.prefilled_tokens += len(rows)
        for start in range(0, len(rows), budget):
            chunk = rows[start : start + budget]
            ids = torch.tensor([sequences[j][p] for j, p in chunk])
            slot_t = torch.tensor([slots[j] for j, _ in chunk])
            pos = torch.tensor([p for _, p in chunk])
            last = [i for i, (j, p) in enumerate(chunk) if p == len(sequences[j]) - 1]
            out, r = self._inv.forward(
                ids, slot_t, pos, self._kv_store(), torch.tensor(last, dtype=torch.long)
            )
            for i, row in enumerate(last):
                logits[chunk[row][0]] = out[i]
            if r is not None and self.is_moe:
                owners = torch.tensor([j for j, _ in chunk])
                for j in owners.unique().tolist():
                    routes[j].append(r[:, owners == j])
        for j, seq in enumerate(sequences):
            self._kv.lengths[slots[j]] = len(seq)
        return [
            (logits[j], torch.cat(routes[j], dim=1) if routes[j] else None) for j in range(len(sequences))
        ]

    def _kv_store(self) -> Any:
        from inhabit.models.invariant import KVStore

        return KVStore(self._kv.keys, self._kv.values)

    def _admit(self, seqs: list[_Seq]) -> None:
        """Prefill `seqs` into rows after the running ones and sample their first tokens. A request
        resuming after preemption recomputes the KV of its prompt and tokens so far and goes on
        decoding from its last token."""
        base = len(self._running)
        slots = list(range(base, base + len(seqs)))
        fresh = [not s.tokens for s in seqs]
        sequences = [s.req.prompt_token_ids + s.tokens[:-1] for s in seqs]
        hits = [self._prefix.lookup(q) if self._prefix is not None else None for q in sequences]
        for s, is_fresh, hit in zip(seqs, fresh, hits, strict=True):
            s.kv_stale = False
            if is_fresh:
                s.order = self._admissions
                self._admissions += 1
                self.prompt_tokens += len(s.req.prompt_token_ids)
                self.cached_prompt_tokens += hit[1] if hit else 0
        rows = base + len(seqs)
        length = max(self._kv.needed_length(base), max(len(q) for q in sequences) + 1)
        self._make_room(rows, length, keep=[h[0] for h in hits if h])
        starts = [0] * len(seqs)
        for j, hit in enumerate(hits):
            if hit is not None:
                entry, starts[j] = hit
                kv = [
                    (k[:, : starts[j]], v[:, : starts[j]])
                    for k, v in zip(entry.keys, entry.values, strict=True)
                ]
                self._kv.write_prefix(slots[j], kv)
        if any(hits):
            self._make_room(rows, length)  # the reused entries may now go too
        if self._inv is not None:
            results = self._det_prefill(slots, sequences, starts)
        else:
            results = self._prefill(slots, sequences, starts)
        for s, is_fresh, (_, routes) in zip(seqs, fresh, results, strict=True):
            if is_fresh and routes is not None:
                s.prompt_routes = routes[:, :-1].permute(1, 0, 2).tolist()
        self._running.extend(seqs)
        new = [j for j in range(len(seqs)) if fresh[j]]
        if not new:
            return
        logits = torch.stack([results[j][0] for j in new])
        last_routes = [None if results[j][1] is None else results[j][1][:, -1].tolist() for j in new]
        self._sample_and_record([base + j for j in new], logits, last_routes)

    def _decode_step(self) -> None:
        self._fit_decode()
        n = len(self._running)
        if self._inv is not None:
            self._det_decode_step(n)
            return
        dev = self.config.device
        ids = torch.tensor([[s.tokens[-1]] for s in self._running], device=dev)
        if self._lean is not None:
            rows, pos, kv_len = self._kv.decode_rows(n)
            mask = self._kv.decode_mask(pos, kv_len, _DTYPES[self.config.dtype], dev)
            logits = self._lean.forward(ids, rows, pos, mask, kv_len, self._kv.keys, self._kv.values)
        else:
            cache = self._kv.decode_cache(n)
            out = self.model(
                input_ids=ids,
                attention_mask=cache.attention_mask(_DTYPES[self.config.dtype], dev),
                position_ids=cache.positions[:, None].to(dev),
                **{self._cache_kw: cache},
                use_cache=True,
            )
            logits = out.logits[:, -1]
        self._kv.commit_decode(n)
        self.steps += 1
        self.decoded_rows += n
        routes = self._take_routes()  # (L, n, 1, k)
        per_row = [None] * n if routes is None else routes[:, :, 0].transpose(0, 1).tolist()
        self._sample_and_record(list(range(n)), logits, per_row)

    def _det_decode_step(self, n: int) -> None:
        assert self._inv is not None
        pos = torch.tensor(self._kv.lengths[:n])
        self._kv.reserve(int(pos.max()) + 1)
        ids = torch.tensor([s.tokens[-1] for s in self._running])
        logits, routes = self._inv.forward(ids, torch.arange(n), pos, self._kv_store())
        self._kv.commit_decode(n)
        self.steps += 1
        self.decoded_rows += n
        per_row = [None] * n if routes is None or not self.is_moe else routes.transpose(0, 1).tolist()
        self._sample_and_record(list(range(n)), logits, per_row)

    def _sample_and_record(self, rows: list[int], logits: torch.Tensor, routes: list) -> None:
        seqs = [self._running[i] for i in rows]
        params = [_row(s) for s in seqs]
        for s, p in zip(seqs, params, strict=True):
            if s.mask is not None:
                p.allowed = s.mask.allowed()
        top_k = max(s.req.sampling.top_logprobs for s in seqs)
        tokens, logps, top = sample_tokens(logits, params, self.config.logprobs_mode, top_k)
        finished: list[tuple[int, str]] = []
        version = self._version
        for j, (row, s, tok, lp, route) in enumerate(
            zip(rows, seqs, tokens.tolist(), logps.tolist(), routes, strict=True)
        ):
            if s.first_token_at is None:
                s.first_token_at = time.monotonic()
            s.tokens.append(tok)
            s.logprobs.append(lp)
            if s.mask is not None:
                s.mask.accept(tok)
            k = s.req.sampling.top_logprobs
            if k and top is not None:
                s.top.append(dict(zip(top[1][j, :k].tolist(), top[0][j, :k].tolist(), strict=True)))
            s.versions.append(version)
            if route is not None:  # [layer][k] expert ids
                s.routes.append(route)
            if s.on_event is not None:
                top_now = s.top[-1] if k and s.top else None
                s.on_event(TokenEvent(s.req.request_id, tok, lp, version, route, top_now))
            reason = self._finish_reason(s)
            if reason:
                finished.append((row, reason))
        if finished:  # together: rows finishing in one step free their buffers in one pass
            self._retire([row for row, _ in finished], dict(finished))

    def _finish_reason(self, s: _Seq) -> str | None:
        if s.tokens[-1] in s.stop_ids:
            return "stop"
        if s.stops is not None and s.stops.hit(s.tokens):
            return "stop"
        if s.mask is not None and s.mask.done:
            return "stop"
        if len(s.tokens) >= s.req.sampling.max_tokens:
            return "length"
        if len(s.req.prompt_token_ids) + len(s.tokens) >= self._kv.max_len:  # context or KV budget
            return "length"
        return None

    # ---------------------------------------------------------------- swaps

    def _apply_swap(self, swap: _Swap) -> None:
        t0 = time.perf_counter()
        try:
            copy_into(self.model, swap.state)
            if self._inv is not None:
                self._inv.refresh()
            self._version = swap.version
            if self._prefix is not None:
                self._prefix.clear()  # keys of the old weights
            if self.config.kv_after_swap == "recompute" and self._running:
                prefixes = [s.req.prompt_token_ids + s.tokens[:-1] for s in self._running]
                slots, starts = list(range(len(prefixes))), [0] * len(prefixes)
                if self._inv is not None:
                    self._det_prefill(slots, prefixes, starts)
                else:
                    self._prefill(slots, prefixes, starts)
                    self._take_routes()
            else:
                for s in self._running:
                    s.kv_stale = True
        except Exception as e:
            log.exception("weight swap failed")
            swap.loop.call_soon_threadsafe(_set_exception, swap.future, e)
            return
        self.last_swap_seconds = time.perf_counter() - t0
        swap.loop.call_soon_threadsafe(_set_result, swap.future, None)

    # ---------------------------------------------------------------- completion

    def _retire(self, rows: list[int], reason: str | dict[int, str], error: str | None = None) -> None:
        """Remove running rows (any order), keeping the running rows in slots 0..n-1; finished rows'
        KV goes to the prefix cache (unless `error`). `reason` is the finish reason of every row, or
        one per row. When the rows left need at most half of the
        slot buffers (a batch finishing together), the buffers shrink in the same pass that copies
        the finished rows out, layer by layer (`SlotKVCache.release`): otherwise the copies would sit
        beside the whole buffers until the next step shrinks them, the process's memory peak."""
        drop = sorted(set(rows), reverse=True)
        if not drop:
            return
        reasons = reason if isinstance(reason, dict) else dict.fromkeys(drop, reason)
        left = [i for i in range(len(self._running)) if i not in set(drop)]
        need = max((self._kv.lengths[i] for i in left), default=0) + 1
        after = self._kv.bytes_for(len(left), need)
        if self._kv.nbytes > 2 * after:
            self._retire_releasing(drop, left, after, reasons, error)
            return
        for row in drop:
            if error is None:
                self._remember(row)
            s = self._remove_row(row)
            self._resolve(s, reasons[row], error)

    def _retire_releasing(
        self, drop: list[int], left: list[int], after: int, reasons: dict[int, str], error: str | None
    ) -> None:
        """`_retire` that reallocates the slot buffers to the `left` rows (`after` bytes)."""
        copy: dict[int, int] = {}
        pending = 0
        for row in drop if error is None else ():
            length = self._kv.lengths[row]
            size = length * self._kv.token_bytes
            if self._rememberable(self._running[row], length) and self._prefix_room(size, after, pending):
                copy[row] = length
                pending += size
        kv = self._kv.release(len(self._running), drop, copy)
        seqs = {row: self._running[row] for row in drop}
        self._running = [self._running[i] for i in left]
        for row in drop:
            if row in copy and self._prefix is not None:
                s = seqs[row]
                keys, values = kv[row]
                self._prefix.insert(
                    PrefixEntry((s.req.prompt_token_ids + s.tokens)[: copy[row]], keys, values)
                )
        self._note_kv_bytes()
        for row in drop:
            self._resolve(seqs[row], reasons[row], error)

    def _remove_row(self, row: int) -> _Seq:
        s = self._running[row]
        last = len(self._running) - 1
        if row != last:
            self._kv.move(last, row)
            self._running[row] = self._running[last]
        self._running.pop()
        self._kv.lengths[last] = 0
        return s

    def _rememberable(self, s: _Seq, length: int) -> bool:
        return self._prefix is not None and not s.kv_stale and length >= self._prefix.min_reuse

    def _prefix_room(self, size: int, slot_bytes: int, pending: int = 0) -> bool:
        """Evict cached prefixes (least recently used first) until `size` more bytes fit the budget
        beside `slot_bytes` of slot buffers and `pending` bytes about to be cached; False if they
        cannot."""
        assert self._prefix is not None
        if size + pending + slot_bytes > self.kv_budget:
            return False
        while self._prefix.nbytes + pending + size + slot_bytes > self.kv_budget and self._prefix.evict_one():
            pass
        return self._prefix.nbytes + pending + size + slot_bytes <= self.kv_budget

    def _remember(self, row: int) -> None:
        """Keep a finishing row's KV in the prefix cache, within the budget (older entries go first)."""
        s, length = self._running[row], self._kv.lengths[row]
        if not self._rememberable(s, length) or not self._prefix_room(
            length * self._kv.token_bytes, self._kv.nbytes
        ):
            return
        keys, values = self._kv.read_row(row, length)
        # The row holds positions of the prompt and of every sampled token but the last.
        self._prefix.insert(PrefixEntry((s.req.prompt_token_ids + s.tokens)[:length], keys, values))
        self._note_kv_bytes()

    def _resolve(self, s: _Seq, reason: str, error: str | None = None) -> None:
        text, cut = "", False
        try:
            text, cut = completion_text(self.tokenizer, s.tokens, s.req.sampling.stop)
        except Exception as e:  # a tokenizer failure must not lose the tokens
            error = error or f"detokenization failed: {e!r}"
        completion = Completion(
            request_id=s.req.request_id,
            token_ids=list(s.tokens),
            logprobs=list(s.logprobs),
            versions=list(s.versions),
            finish_reason="stop" if cut and reason == "length" else reason,  # type: ignore[arg-type]
            text=text,
            routed_experts=list(s.routes) if s.routes else None,
            prompt_token_ids=list(s.req.prompt_token_ids),
            error=error,
            top_logprobs=list(s.top) if s.req.sampling.top_logprobs else None,
            prompt_routed_experts=s.prompt_routes,
        )
        with self._lock:
            self._in_flight -= 1
        now = time.monotonic()
        for hook in self.finish_hooks:
            try:
                hook(completion, s.submitted, s.first_token_at, now)
            except Exception:  # observing must never lose a result
                log.exception("finish hook failed")
        s.loop.call_soon_threadsafe(_set_result, s.future, completion)

    def _fail_all(self, err: Exception) -> None:
        with self._lock:
            pending = list(self._waiting) + list(self._running)
            self._waiting.clear()
            swaps, self._swaps = self._swaps, []
        self._running = []
        for s in pending:
            with contextlib.suppress(RuntimeError):  # its loop may already be closed
                s.loop.call_soon_threadsafe(_set_exception, s.future, err)
        for w in swaps:
            with contextlib.suppress(RuntimeError):
                w.loop.call_soon_threadsafe(_set_exception, w.future, err)


def _set_result(fut: asyncio.Future, value: Any) -> None:
    if not fut.done():
        fut.set_result(value)


def _set_exception(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _eos_ids(model: Any) -> frozenset[int]:
    ids: set[int] = set()
    for cfg in (getattr(model, "generation_config", None), model.config):
        eos = getattr(cfg, "eos_token_id", None) if cfg is not None else None
        if isinstance(eos, int):
            ids.add(eos)
        elif isinstance(eos, list | tuple):
            ids.update(int(e) for e in eos)
    return frozenset(ids)


def _make_capture(model: Any) -> Any:
    from inhabit.models.routing import RoutingCapture, is_moe

    return RoutingCapture(model) if is_moe(model) else None


def _kv_length(s: _Seq) -> int:
    """Positions a request's KV holds once prefilled: its prompt, and its tokens but the last when it
    resumes after preemption."""
    return len(s.req.prompt_token_ids) + max(len(s.tokens) - 1, 0)


def _row(s: _Seq) -> RowSampling:
    # Made once per request: every field is fixed, and `completion` is the request's own token
    # list, which grows in place.
    if s.row is not None:
        return s.row
    sp = s.req.sampling
    if not sp.adjusted():
        s.row = RowSampling(sp.temperature, sp.top_p, s.generator)
    else:
        s.row = RowSampling(
            sp.temperature,
            sp.top_p,
            s.generator,
            sp.presence_penalty,
            sp.frequency_penalty,
            sp.logit_bias,
            s.tokens,
        )
    return s.row
