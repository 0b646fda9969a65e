"""`Trainer`: the RL train step over samples, policy versions, weights for the engine, checkpoints.

    trainer = Trainer(model, TrainerConfig(lr=1e-4), tokenizer=tok)   # version 0 = model as given
    metrics = trainer.train_step(samples)        # one policy update; trainer.version is now 1
    await engine.load_weights(trainer.state_dict_for_engine(), trainer.version)
    trainer.save(run / "checkpoints" / "v000001")   # later: Trainer(...).load(that dir)

A train step: pack the samples into micro-batches under `micro_batch_tokens`, run each forward in
fp32 (the model's own dtype, CPU by default) with the routes the engine recorded forced on MoE
layers (`router_replay`), score the generated tokens under the tempered distribution
log_softmax(logits / temperature), apply the policy loss (losses.py) with gradient accumulation
so the gradient is that of the whole batch, clip the global grad norm, step AdamW and the
schedule, and advance the policy version by one. With `updates_per_step = k > 1` the batch is
split round-robin into k mini-batches, each its own optimizer update, all measured against the
logprobs of a no-grad pass over the whole batch before the first update (the proximal policy).
`epochs = E > 1` makes E passes over those mini-batches (E x k updates, the same proximal policy).
With `[trainer.lora]` only peft LoRA adapters train (lora.py); engines get the merged weights.

Only the positions that predict a generated token go through the LM head (on tiny models the
vocabulary projection is most of the compute), and the forward never builds a KV cache.

Built inside a torch.distributed group of N > 1 ranks, the trainer is data-parallel (FSDP2-sharded,
each rank a share of every batch, the same normalizers and so the same step as one process; see
distributed.py). `precision = "bf16-mixed"` runs forward and backward under bf16 autocast over
fp32 weights and optimizer; `activation_checkpointing` recomputes decoder layers in backward.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import random
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from inhabit.errors import TrainerError
from inhabit.log import get_logger
from inhabit.trainer.batching import MicroBatch, collate, pack_microbatches
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.distributed import Scorer, balance, empty_sample
from inhabit.trainer.losses import LossStats, k3, policy_loss, sft_loss
from inhabit.trainer.metrics import MismatchAccumulator, StepMetrics
from inhabit.trainer.optim import build_optimizer
from inhabit.trainer.samples import Sample, split_stale

log = get_logger(__name__)


class Trainer:
    """Owns a model, its optimizer and schedule, and the policy version (see module docstring)."""

    def __init__(
        self, model: Any, config: TrainerConfig | None = None, *, tokenizer: Any = None, version: int = 0
    ) -> None:
        from inhabit.models.routing import is_moe

        self.config = config or TrainerConfig()
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)
        seed_everything(self.config.seed)
        self.model = model.to(device=self.config.device, dtype=torch.float32)
        self.model.train()
        if self.config.activation_checkpointing:
            self.model.activation_checkpointing_enable({"use_reentrant": False})
        self.reference: Any = None
        """kl_coef > 0: a frozen copy of the starting weights, the KL anchor's reference policy."""
        if self.config.kl_coef > 0:
            self.reference = copy.deepcopy(self.model).eval().requires_grad_(False)
            self._reference_scorer = Scorer(self.reference)
        if self.config.lora is not None:  # after the cast, before the optimizer: only adapters train
            from inhabit.trainer.lora import inject, trainable_parameters

            self.model = inject(self.model, self.config.lora)
            trained, total = trainable_parameters(self.model)
            log.info("LoRA rank %d: %d of %d parameters train", self.config.lora.rank, trained, total)
        self.scorer = Scorer(self.model)
        """The forward the steps run (FSDP2's root when data-parallel)."""
        self.dp = _data_parallel(self.scorer)
        """This rank's data-parallel group, or None in one process."""
        self.tokenizer = tokenizer
        self.is_moe = is_moe(self.model)
        self.optimizer, self.scheduler = build_optimizer(self.model, self.config)
        self.version = int(version)
        """Policy version of the current weights; +1 per train_step."""
        self.steps = 0
        """train_step calls since the run began (restored by load)."""
        self.data_state: dict[str, Any] = {}
        """The caller's data position (JSON-able), saved and restored with checkpoints."""
        pad = getattr(model.config, "pad_token_id", None)
        self.pad_token_id = int(pad) if isinstance(pad, int) else 0
        self._inv: Any = None
        self._inv_logits: list[torch.Tensor] | None = None
        if self.config.deterministic:
            from inhabit.models.invariant import InvariantForward, check_supported

            if torch.device(self.config.device).type != "cpu":
                raise TrainerError("trainer.deterministic runs on CPU only; set trainer.device = 'cpu'")
            try:
                check_supported(self.model)
            except Exception as e:
                raise TrainerError(str(e)) from e
            self._inv = InvariantForward(self.model, getattr(torch, self.config.deterministic_dtype))

    @classmethod
    def from_pretrained(
        cls, path: str | Path, config: TrainerConfig | None = None, *, version: int = 0
    ) -> Trainer:
        """A trainer over a local Hugging Face folder (model + tokenizer), e.g. a checkpoint."""
        from inhabit.models.loading import load_model

        model, tokenizer = load_model(path)
        return cls(model, config, tokenizer=tokenizer, version=version)

    # ------------------------------------------------------------------ public API

    def train_step(self, samples: Sequence[Sample], *, max_staleness: int | None = None) -> StepMetrics:
        """One policy update from `samples` (any number; micro-batched); returns the step's metrics.

        With `max_staleness`, samples holding a token generated more than that many versions before
        `self.version` are dropped here, at the optimizer's door, whatever the caller's scheduling
        (`StepMetrics.stale_dropped` counts them). Raises TrainerError when nothing trainable is left.
        """
        dropped = 0
        if max_staleness is not None:
            samples, stale = split_stale(samples, self.version, max_staleness)
            dropped = len(stale)
        metrics = self._run(samples, update=True, stale_dropped=dropped)
        log.info(
            "step v%d: loss %.4f grad %.3g lr %.3g | reward %.3f | ratio %.3f [%.3f, %.3f] trunc %.3f "
            "mask %.3f clip %.3f | mismatch %.2e kl %.2e | routing %s | stale %.2f/%d (-%d) | %d tok %.1fs",
            metrics.version,
            metrics.loss,
            metrics.grad_norm,
            metrics.lr,
            metrics.reward_mean,
            metrics.ratio_mean,
            metrics.ratio_min,
            metrics.ratio_max,
            metrics.truncated_fraction,
            metrics.masked_fraction,
            metrics.clip_fraction,
            metrics.mismatch_mean_abs,
            metrics.mismatch_kl_k3,
            "-" if metrics.routing_disagreement is None else f"{metrics.routing_disagreement:.3f}",
            metrics.staleness_mean,
            metrics.staleness_max,
            dropped,
            metrics.tokens,
            metrics.step_s,
        )
        return metrics

    def sft_step(self, samples: Sequence[Sample]) -> StepMetrics:
        """One supervised (next-token) update: mean negative log-likelihood of the loss-mask tokens at
        temperature 1 (e.g. `chat_sample`s of scripted transcripts, the bootstrap stage). Same
        micro-batching, optimizer, schedule and version bump as `train_step`; `loss` is the NLL per
        token and the RL figures (ratios, mismatch) are 0."""
        metrics = self._run(samples, update=True, sft=True)
        log.info(
            "sft v%d: nll %.4f grad %.3g lr %.3g | %d tok %.1fs",
            metrics.version,
            metrics.loss,
            metrics.grad_norm,
            metrics.lr,
            metrics.tokens,
            metrics.step_s,
        )
        return metrics

    def sft_measure(self, samples: Sequence[Sample]) -> StepMetrics:
        """What `sft_step` would report on `samples` (`loss`: NLL per loss token), without updating:
        a held-out evaluation. No gradient, no optimizer step, no version bump."""
        return self._run(samples, update=False, sft=True)

    def measure(self, samples: Sequence[Sample]) -> StepMetrics:
        """The metrics a train step would report on `samples` (mismatch, ratios), without updating."""
        return self._run(samples, update=False)

    def state_dict_for_engine(self) -> dict[str, torch.Tensor]:
        """A detached CPU copy of the weights, in the model's own names (`engine.load_weights` takes it).
        Data-parallel: a collective (every rank calls it), the full weights on every rank.
        LoRA: the base model's names, the adapters merged into the projections they wrap."""
        if self.config.lora is not None:
            from inhabit.trainer.lora import merged_state_dict

            return merged_state_dict(self.model)
        if self.dp is not None:
            from inhabit.trainer.distributed import full_state_dict

            return full_state_dict(self.model)
        return {k: v.detach().to("cpu", copy=True) for k, v in self.model.state_dict().items()}

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint folder atomically (see checkpoint.py); return its path."""
        from inhabit.trainer.checkpoint import save_checkpoint

        return save_checkpoint(self, path)

    def load(self, path: str | Path) -> Trainer:
        """Restore weights, optimizer, schedule, RNGs, version and data position from a checkpoint."""
        from inhabit.trainer.checkpoint import load_checkpoint

        load_checkpoint(self, path)
        return self

    def export_model(self, path: str | Path, state_dict: dict[str, torch.Tensor] | None = None) -> Path:
        """Write an ordinary Hugging Face folder (plus the tokenizer when the trainer has one).
        Data-parallel: pass `state_dict_for_engine()` (gathered by every rank); one rank writes.
        LoRA: the merged weights (servable as any folder; the adapter alone: `lora.save_adapter`)."""
        path = Path(path)
        if self.dp is not None and state_dict is None:
            raise TrainerError("a data-parallel trainer exports the gathered weights: pass state_dict")
        if state_dict is None and self.config.lora is not None:
            state_dict = self.state_dict_for_engine()
        self.model.save_pretrained(path, safe_serialization=True, state_dict=state_dict)
        if self.tokenizer is not None:
            from inhabit.models.tokenizer import save_tokenizer

            save_tokenizer(self.tokenizer, path)
        return path

    @property
    def lr(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    # ------------------------------------------------------------------ the step

    def _run(
        self, samples: Sequence[Sample], update: bool, stale_dropped: int = 0, sft: bool = False
    ) -> StepMetrics:
        t0 = time.perf_counter()
        if self._inv is not None:
            self._inv.refresh()  # weights may have changed since the last step (load, another update)
        samples = [s for s in samples if s.num_loss_tokens > 0]
        if not samples:
            raise TrainerError(
                "no sample with a generated token"
                + (f" ({stale_dropped} dropped as too stale)" if stale_dropped else "")
                + "; skip the step instead"
            )
        cfg = self.config
        k = min(cfg.updates_per_step, len(samples)) if update and not sft else 1
        epochs = cfg.epochs if update and not sft else 1
        minibatches = [samples[j::k] for j in range(k)]
        acc = MismatchAccumulator(self.version)
        stats = LossStats()
        proximal: list[list[torch.Tensor]] | None = None
        if k > 1 or epochs > 1:  # the proximal policy: everyone's logprobs before the first update
            proximal = [[self._score(mb, acc) for mb in self._micro(self._share(m))] for m in minibatches]
        losses, grad_norms = [], []
        n_micro = 0
        kl_sum = 0.0  # k3 KL to the starting policy, summed over loss tokens (kl_coef > 0)
        for j, mini in [(j, m) for _ in range(epochs) for j, m in enumerate(minibatches)]:
            n_tok = sum(s.num_loss_tokens for s in mini)
            if update:
                self.optimizer.zero_grad(set_to_none=True)
            total = 0.0
            for i, mb in enumerate(self._micro(self._share(mini))):
                n_micro += 1
                measure = acc if proximal is None and not sft else None
                with self._routing(mb, measure), torch.enable_grad() if update else torch.no_grad():
                    if sft:
                        lp = self._forward(mb, None, grad=update, temperature=1.0)
                        loss = sft_loss(lp, mb.loss_mask, num_tokens=n_tok)
                        st = LossStats(tokens=int(mb.loss_mask.sum()), sequences=mb.num_rows)
                    else:
                        lp = self._forward(mb, measure, grad=update)
                        prox = lp.detach() if proximal is None else proximal[j][i]
                        loss, st = policy_loss(
                            lp,
                            prox,
                            mb.behaviour_logprobs,
                            mb.advantages,
                            mb.loss_mask,
                            cfg.loss,
                            num_tokens=n_tok,
                            num_sequences=len(mini),
                        )
                        if self.reference is not None:
                            kl = k3(lp, self._reference_logprobs(mb), mb.loss_mask)
                            kl_sum += float(kl.detach())
                            loss = loss + cfg.kl_coef * kl / n_tok
                    if update:
                        loss.backward()
                total += float(loss.detach())
                stats = stats.merge(st)
            losses.append(total if self.dp is None else self.dp.all_sum(total))
            if update:
                limit = cfg.grad_clip if cfg.grad_clip is not None else float("inf")
                params = [p for p in self.model.parameters() if p.grad is not None]
                norm = torch.nn.utils.clip_grad_norm_(params, limit)
                grad_norms.append(float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm))
                self.optimizer.step()
                self.scheduler.step()
                if self._inv is not None:
                    self._inv.refresh()
        if update:
            self.optimizer.zero_grad(set_to_none=True)
            self.version += 1
            self.steps += 1
        if self.dp is not None:  # every rank's sums, so each reports the whole batch
            parts = self.dp.gather((stats, acc))
            stats = LossStats()
            acc = MismatchAccumulator(self.version - (1 if update else 0))
            for st, a in parts:
                stats = stats.merge(st)
                acc.merge(a)
        metrics = self._metrics(
            samples, acc, stats, losses, grad_norms, n_micro, k * epochs if update else 0, t0
        )
        kl_ref = kl_sum / max(1, metrics.loss_tokens) if self.reference is not None else None
        return dataclasses.replace(metrics, stale_dropped=stale_dropped, kl_ref=kl_ref)

    def _score(self, mb: MicroBatch, acc: MismatchAccumulator | None) -> torch.Tensor:
        """Logprobs without gradient (the proximal policy, or a measurement)."""
        with self._routing(mb, acc):
            return self._forward(mb, acc, grad=False)

    def _micro(self, samples: Sequence[Sample]) -> list[MicroBatch]:
        groups = pack_microbatches(samples, self.config.micro_batch_tokens)
        batches = [collate([samples[i] for i in g], self.pad_token_id).to(self.config.device) for g in groups]
        if self.dp is not None:  # FSDP: every rank runs as many forwards as the busiest one
            pad = collate([empty_sample(self.pad_token_id)], self.pad_token_id).to(self.config.device)
            batches += [pad] * (self.dp.all_max(len(batches)) - len(batches))
        return batches

    def _share(self, samples: Sequence[Sample]) -> list[Sample]:
        """This rank's part of `samples` (all of them in one process)."""
        if self.dp is None:
            return list(samples)
        return [samples[i] for i in balance(samples, self.dp.world_size)[self.dp.rank]]

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.config.precision != "bf16-mixed":
            return contextlib.nullcontext()
        return torch.autocast(torch.device(self.config.device).type, dtype=torch.bfloat16)

    @contextlib.contextmanager
    def _routing(self, mb: MicroBatch, acc: MismatchAccumulator | None) -> Iterator[None]:
        """MoE: force the recorded experts (router replay) and record the ones used, for the whole
        forward + backward (activation checkpointing re-runs routers inside backward)."""
        from inhabit.models.routing import RoutingCapture, RoutingError, RoutingReplay

        if self._inv is not None:
            with self._invariant_pass(mb, acc):
                yield
            return
        routes = mb.routed_experts if self.is_moe else None
        if routes is None:
            yield
            return
        with contextlib.ExitStack() as stack:
            try:
                if self.config.router_replay:
                    stack.enter_context(RoutingReplay(self.model, routes.permute(2, 0, 1, 3)))
                capture = stack.enter_context(RoutingCapture(self.model))
            except RoutingError as e:
                raise TrainerError(f"samples' routed experts do not fit this model: {e}") from e
            yield
            if acc is not None and capture.calls:
                acc.add_routes(capture.calls[0].permute(1, 2, 0, 3), routes)

    @contextlib.contextmanager
    def _invariant_pass(self, mb: MicroBatch, acc: MismatchAccumulator | None) -> Iterator[None]:
        """Deterministic mode: the batch-invariant forward gives this micro-batch's logprob VALUES and
        MoE routes (measured against the engine's: routing disagreement without any replay); the
        standard forward, with those routes forced for the whole forward + backward, gives the
        gradient (see `_forward`)."""
        from inhabit.models.routing import RoutingReplay

        lengths = mb.attention_mask.sum(1).tolist()
        ids = mb.input_ids.cpu()
        logits, routes = self._inv.sequence_logits([ids[i, :n].tolist() for i, n in enumerate(lengths)])
        self._inv_logits = logits
        try:
            first = routes[0]
            if first is None:
                yield
                return
            got = torch.full((*mb.input_ids.shape, *first.shape[1:]), -1, dtype=torch.long)
            for i, (r, n) in enumerate(zip(routes, lengths, strict=True)):
                got[i, :n] = r
            if acc is not None and mb.routed_experts is not None:
                acc.add_routes(got, mb.routed_experts.cpu())
            with RoutingReplay(self.model, got.permute(2, 0, 1, 3).to(mb.input_ids.device)):
                yield
        finally:
            self._inv_logits = None

    def _forward(
        self, mb: MicroBatch, acc: MismatchAccumulator | None, grad: bool, temperature: float | None = None
    ) -> torch.Tensor:
        """[B, T] logprobs of each token under the trainer (0 where not a loss token).

        Deterministic mode: the values are the batch-invariant forward's (`_invariant_pass`, bitwise
        the engine's), the gradient the standard forward's: lp = invariant + (standard - standard),
        whose value is exactly the invariant one (x - x == 0) and whose gradient is the standard one.
        """
        assert not bool(mb.loss_mask[:, 0].any()), "token 0 has no prediction; it cannot be a loss token"
        temp = self.config.temperature if temperature is None else temperature
        if self._inv is None:
            with contextlib.nullcontext() if grad else torch.no_grad():
                lp, logp = self._standard_logprobs(mb, temp)
        else:
            lp, logp = self._invariant_logprobs(mb, temp)
            if grad:
                std, _ = self._standard_logprobs(mb, temp)
                lp = lp + (std - std.detach())
        if acc is not None:
            with torch.no_grad():
                acc.add_entropy(float(-(logp.exp() * logp).sum()))
            acc.add_logprobs(lp, mb.behaviour_logprobs, mb.loss_mask, mb.versions)
        return lp

    def _reference_logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """[B, T] logprobs of each token under the starting policy (the KL anchor's reference), with
        its own routing for MoE models (the recorded routes are the rollout policy's)."""
        with torch.no_grad():
            return self._standard_logprobs(mb, self.config.temperature, self._reference_scorer)[0]

    def _standard_logprobs(
        self, mb: MicroBatch, temp: float, scorer: Scorer | None = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """([B, T] token logprobs, [loss tokens, V] log-distribution) of the model's own forward
        (or of `scorer`'s: the KL anchor's reference)."""
        # Only positions that predict a generated token go through the LM head. `scorer` is the
        # model's root (FSDP's hooks run there when the trainer is data-parallel).
        sel = mb.loss_mask[:, 1:]
        with self._autocast():
            logits = (scorer or self.scorer)(mb.input_ids, mb.attention_mask, sel)
        logp = torch.log_softmax(logits.float() / temp, dim=-1)
        return self._scatter(mb, logp), logp

    def _invariant_logprobs(self, mb: MicroBatch, temp: float) -> tuple[torch.Tensor, torch.Tensor]:
        """`_standard_logprobs` from the invariant pass's logits, transformed exactly as the engine's
        sampler does (fp32 logits divided by a [rows, 1] temperature tensor, then log_softmax)."""
        assert self._inv_logits is not None, "_invariant_pass computes the logits first"
        sel = mb.loss_mask[:, 1:].cpu()
        rows = [lg[:-1][sel[i, : lg.shape[0] - 1]] for i, lg in enumerate(self._inv_logits)]
        logits = torch.cat(rows)
        logits = logits / torch.full((logits.shape[0], 1), temp, dtype=torch.float32)
        logp = torch.log_softmax(logits, dim=-1).to(mb.input_ids.device)
        return self._scatter(mb, logp), logp

    @staticmethod
    def _scatter(mb: MicroBatch, logp: torch.Tensor) -> torch.Tensor:
        """[B, T] logprob of each loss token (0 elsewhere) from the [loss tokens, V] log-distribution."""
        sel = mb.loss_mask[:, 1:]
        token_lp = logp.gather(1, mb.input_ids[:, 1:][sel][:, None]).squeeze(1)
        full = torch.zeros(sel.shape, dtype=token_lp.dtype, device=token_lp.device)
        full = full.masked_scatter(sel, token_lp)
        return torch.cat([torch.zeros_like(full[:, :1]), full], dim=1)

    def _metrics(
        self,
        samples: Sequence[Sample],
        acc: MismatchAccumulator,
        stats: LossStats,
        losses: list[float],
        grad_norms: list[float],
        n_micro: int,
        updates: int,
        t0: float,
    ) -> StepMetrics:
        elapsed = time.perf_counter() - t0
        tokens = sum(s.num_tokens for s in samples)
        adv = torch.tensor([s.advantage for s in samples])
        return StepMetrics(
            version=self.version,
            loss=sum(losses) / max(len(losses), 1),
            grad_norm=max(grad_norms) if grad_norms else 0.0,
            lr=self.lr,
            samples=len(samples),
            micro_batches=n_micro,
            updates=updates,
            tokens=tokens,
            loss_tokens=sum(s.num_loss_tokens for s in samples),
            reward_mean=sum(s.reward for s in samples) / len(samples),
            advantage_mean=float(adv.mean()),
            advantage_abs_mean=float(adv.abs().mean()),
            **stats.summary(),
            **acc.summary(),
            step_s=elapsed,
            tokens_per_s=tokens / elapsed if elapsed > 0 else 0.0,
        )


def _data_parallel(scorer: Scorer) -> Any:
    """Shard `scorer` with FSDP2 when this process is one rank of several (distributed.py)."""
    from inhabit.trainer.distributed import current, shard

    dp = current()
    if dp is not None:
        shard(scorer)
    return dp


def seed_everything(seed: int) -> None:
    """Seed torch, python's `random` and numpy's global RNG (all three are checkpointed)."""
    torch.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)
