"""Router capture and replay for mixture-of-experts models, without editing installed packages.

In transformers 5.x, `Qwen3MoeSparseMoeBlock.forward` calls its gate, a `Qwen3MoeTopKRouter`,
which returns `(router_logits, top_k_weights, top_k_index)` for the flattened tokens of the call;
the experts then run on those ids and weights. We replace that router's `forward` on each router
INSTANCE (the class and every other model stay untouched) with a function that:

* records `top_k_index` of every call (`RoutingCapture`), and/or
* forces given expert ids (`RoutingReplay`).

Layer index `l` below means the l-th MoE layer in model order (`moe_layers(model)`); dense layers
(`mlp_only_layers`) have no router and are skipped.

Shapes. A forward over `input_ids` of shape (batch, seq) routes `batch*seq` tokens per MoE layer.
`RoutingCapture.calls[i]` is a long tensor (layers, batch, seq, k) for the i-th forward, so a
prefill then one call per KV-cached decode step gives the prompt's ids then each new token's.
`expert_ids(b)` concatenates one batch row over calls to (layers, tokens, k); `token_major` turns
that into the engine's `Completion.routed_experts` layout, [token][layer][k].

Replay takes (layers, tokens, k) (batch 1, or tokens flattened row-major over (batch, seq)) or
(layers, batch, seq, k), as a tensor or nested lists. Each forward call consumes the next `seq`
positions, so one full-sequence forward consumes everything, and a prefill plus decode steps
replays step by step. An id of -1 anywhere in a token's row means "route this token freely"
(padding, or prompt tokens whose routing was never recorded).

Weights under replay (the choice, and why): the forced ids select the experts, and the mixing
weights are recomputed from the router's CURRENT logits at those ids exactly as the router would
have computed them for its own choice: softmax over all experts, gathered at the forced ids, then
renormalized over the k if `norm_topk_prob`. Hence (a) when the forced ids equal the router's own
choice the output is bit-identical to free routing, and (b) gradients flow to the router weight
through the logits, so training still teaches the router (the usual "routing replay" of RL
trainers: rollout and trainer agree on WHICH experts, the trainer owns HOW MUCH).

    with RoutingCapture(model) as cap:
        out = model.generate(ids, max_new_tokens=16)
    recorded = cap.expert_ids(0)                       # (layers, prompt+new-1, k)
    with RoutingReplay(model, recorded):
        logits = model(full_ids[:, :recorded.shape[1]]).logits

Captures and replays nest in any order; the router's original forward comes back when the last
one on a router exits.

Activation checkpointing (`model.activation_checkpointing_enable()`) re-runs each layer's forward
during backward. Those re-runs are recognized (they happen inside the autograd engine) and repeat
the forced ids of the original call instead of consuming new ones, and captures ignore them. So
with checkpointing, call `loss.backward()` INSIDE the `with RoutingReplay(...)` block; leaving the
block before backward would let the re-runs route freely, which `__exit__` refuses with an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from inhabit.errors import InferenceError


class RoutingError(InferenceError):
    """Router capture/replay was misused (not an MoE model, ids of the wrong shape or range)."""


def moe_layers(model: nn.Module) -> list[nn.Module]:
    """The model's sparse MoE blocks in layer order (each has a top-k router as `.gate`)."""
    return [m for m in model.modules() if _is_router(getattr(m, "gate", None))]


def routers(model: nn.Module) -> list[nn.Module]:
    """The top-k routers of `moe_layers(model)`, in the same order."""
    return [block.gate for block in moe_layers(model)]


def _is_router(m: Any) -> bool:
    # Qwen3MoeTopKRouter and its look-alikes (Qwen2-MoE, OLMoE, Mixtral in transformers 5.x).
    return (
        isinstance(m, nn.Module)
        and type(m).__name__.endswith("TopKRouter")
        and hasattr(m, "top_k")
        and hasattr(m, "num_experts")
        and isinstance(getattr(m, "weight", None), torch.Tensor)
    )


def is_moe(model: nn.Module) -> bool:
    return bool(moe_layers(model))


# Routers whose math `_routed_forward` reproduces under replay (softmax, top-k, renormalize).
# Capture works on any top-k router since it runs the router's own forward.
REPLAYABLE_ROUTERS = frozenset({"Qwen3MoeTopKRouter"})


class _State:
    """Per-router hook state: the recorders and at most one forcer currently attached."""

    def __init__(self, router: nn.Module) -> None:
        self.router = router
        self.had_own_forward = "forward" in router.__dict__
        self.saved_forward = router.__dict__.get("forward")
        self.recorders: list[tuple[RoutingCapture, int]] = []
        self.forcer: tuple[RoutingReplay, int] | None = None
        self.pending_shape: tuple[int, int] | None = None
        self.block_hook: Any = None


_ATTR = "_inhabit_routing_state"


def _attach(block: nn.Module) -> _State:
    router = block.gate
    state: _State | None = getattr(router, _ATTR, None)
    if state is not None:
        return state
    state = _State(router)
    setattr(router, _ATTR, state)

    def pre_hook(_module: nn.Module, args: tuple, kwargs: dict) -> None:
        hidden = args[0] if args else kwargs["hidden_states"]
        state.pending_shape = (
            (hidden.shape[0], hidden.shape[1]) if hidden.dim() == 3 else (1, hidden.shape[0])
        )

    # The router sees tokens flattened; its block still sees (batch, seq, hidden).
    state.block_hook = block.register_forward_pre_hook(pre_hook, with_kwargs=True)
    router.forward = lambda hidden_states: _routed_forward(state, hidden_states)  # instance attribute only
    return state


def _detach_if_idle(state: _State) -> None:
    if state.recorders or state.forcer is not None:
        return
    router = state.router
    state.block_hook.remove()
    if state.had_own_forward:
        router.forward = state.saved_forward
    else:
        del router.forward
    delattr(router, _ATTR)


def _routed_forward(state: _State, hidden_states: torch.Tensor):
    router = state.router
    hidden = hidden_states.reshape(-1, router.weight.shape[1])
    batch, seq = state.pending_shape or (1, hidden.shape[0])
    state.pending_shape = None
    if batch * seq != hidden.shape[0]:  # router called outside its block: treat as one row
        batch, seq = 1, hidden.shape[0]
    if state.forcer is None:
        # Free routing: the router's own code, untouched (so capture never changes results).
        original = state.saved_forward or type(router).forward.__get__(router)
        logits, top_value, top_index = original(hidden_states)
    else:
        # Qwen3-MoE router math (softmax over experts, then top-k, then optional renormalization),
        # with the top-k ids replaced by the forced ones and the weights gathered at them.
        logits = nn.functional.linear(hidden, router.weight, getattr(router, "bias", None))
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top_value, top_index = torch.topk(probs, router.top_k, dim=-1)
        replay, layer = state.forcer
        if _in_backward():  # activation-checkpoint recomputation: repeat the forward's decision
            forced = replay._recall(layer, hidden)
        else:
            forced = replay._take(layer, batch, seq).to(top_index.device)
            if torch.is_grad_enabled():
                replay._remember(layer, hidden, forced)
        free = (forced < 0).any(dim=-1, keepdim=True)
        top_index = torch.where(free, top_index, forced.clamp(min=0))
        top_value = probs.gather(-1, top_index)
        if getattr(router, "norm_topk_prob", False):
            top_value = top_value / top_value.sum(dim=-1, keepdim=True)
        top_value = top_value.to(logits.dtype)
    if not _in_backward():  # a checkpoint's recomputation is not a new forward call
        for capture, layer in state.recorders:
            capture._record(layer, top_index.detach().reshape(batch, seq, -1))
    return logits, top_value, top_index


def _in_backward() -> bool:
    # Activation checkpointing re-runs layer forwards inside backward; torch.utils.checkpoint
    # itself uses this call to tell the two apart.
    return torch._C._current_graph_task_id() != -1


def _fingerprint(hidden: torch.Tensor) -> tuple:
    # Recomputation is bitwise deterministic on the same device, so shape plus an fp64 sum tells
    # calls apart when several forwards precede one backward (gradient accumulation).
    h = hidden.detach()
    return (tuple(h.shape), float(h.sum(dtype=torch.float64)))


class RoutingCapture:
    """Context manager recording the top-k expert ids of every token in every MoE layer."""

    def __init__(self, model: nn.Module) -> None:
        self.blocks = moe_layers(model)
        if not self.blocks:
            raise RoutingError(f"{type(model).__name__} has no top-k MoE router to capture")
        self.calls: list[torch.Tensor] = []
        """One (layers, batch, seq, k) long tensor per forward call, in call order."""
        self._pending: list[torch.Tensor | None] = []

    @property
    def num_layers(self) -> int:
        return len(self.blocks)

    def __enter__(self) -> RoutingCapture:
        for layer, block in enumerate(self.blocks):
            _attach(block).recorders.append((self, layer))
        return self

    def __exit__(self, *exc: object) -> None:
        for block in self.blocks:
            state: _State = getattr(block.gate, _ATTR)
            state.recorders = [(c, i) for c, i in state.recorders if c is not self]
            _detach_if_idle(state)

    def _record(self, layer: int, ids: torch.Tensor) -> None:
        if layer == 0 or not self._pending:
            self._pending = [None] * self.num_layers
        self._pending[layer] = ids
        if layer == self.num_layers - 1:
            if any(t is None for t in self._pending):  # a layer skipped: cannot align, drop the call
                raise RoutingError(
                    "an MoE layer did not route during a forward pass; capture is inconsistent"
                )
            self.calls.append(torch.stack(self._pending))  # type: ignore[arg-type]
            self._pending = []

    def clear(self) -> list[torch.Tensor]:
        """Return the calls recorded so far and start afresh (for an engine, once per step)."""
        calls, self.calls = self.calls, []
        return calls

    def expert_ids(self, batch_index: int = 0) -> torch.Tensor:
        """(layers, tokens, k): one batch row's ids over all calls, in token order."""
        if not self.calls:
            raise RoutingError("nothing was captured: run a forward pass inside the `with` block")
        return torch.cat([c[:, batch_index] for c in self.calls], dim=1)


def token_major(expert_ids: torch.Tensor) -> list[list[list[int]]]:
    """(layers, tokens, k) -> [token][layer][k] lists, the `Completion.routed_experts` layout."""
    return expert_ids.permute(1, 0, 2).tolist()


def layer_major(routed_experts: Sequence[Sequence[Sequence[int]]]) -> torch.Tensor:
    """[token][layer][k] lists (as in `Completion.routed_experts`) -> (layers, tokens, k) tensor."""
    t = torch.as_tensor(routed_experts, dtype=torch.long)
    if t.dim() != 3:
        raise RoutingError(f"routed experts must be [token][layer][k]; got {t.dim()} dimensions")
    return t.permute(1, 0, 2).contiguous()


class RoutingReplay:
    """Context manager forcing recorded expert ids in later forward passes (see module docstring)."""

    def __init__(self, model: nn.Module, expert_ids: torch.Tensor | Sequence[Any]) -> None:
        self.blocks = moe_layers(model)
        if not self.blocks:
            raise RoutingError(f"{type(model).__name__} has no top-k MoE router to replay into")
        ids = (
            torch.as_tensor(expert_ids, dtype=torch.long)
            if not isinstance(expert_ids, torch.Tensor)
            else expert_ids
        )
        ids = ids.long()
        if ids.dim() not in (3, 4):
            raise RoutingError(
                f"expert ids must be (layers, tokens, k) or (layers, batch, seq, k); got shape {tuple(ids.shape)}"
            )
        gate = self.blocks[0].gate
        if type(gate).__name__ not in REPLAYABLE_ROUTERS:
            raise RoutingError(
                f"replay is implemented for {', '.join(sorted(REPLAYABLE_ROUTERS))}, not {type(gate).__name__} "
                "(capture works for it)"
            )
        if ids.shape[0] != len(self.blocks) or ids.shape[-1] != gate.top_k:
            raise RoutingError(
                f"expert ids have shape {tuple(ids.shape)} but the model has {len(self.blocks)} MoE layers "
                f"and top-{gate.top_k} routing"
            )
        if ids.numel() and int(ids.max()) >= gate.num_experts:
            raise RoutingError(
                f"expert id {int(ids.max())} out of range: the model has {gate.num_experts} experts"
            )
        self.expert_ids = ids
        self._cursor = [0] * len(self.blocks)
        self._model = model
        # Forced ids of each grad-enabled call, for activation-checkpoint recomputation.
        self._memo: list[list[tuple[tuple, torch.Tensor]]] = [[] for _ in self.blocks]
        self._recalled = False

    def _take(self, layer: int, batch: int, seq: int) -> torch.Tensor:
        start = self._cursor[layer]
        ids = self.expert_ids[layer]
        if ids.dim() == 2:  # (tokens, k): consume batch*seq rows
            n = batch * seq
            if start + n > ids.shape[0]:
                raise RoutingError(
                    f"replay ran out of recorded tokens: MoE layer {layer} needs {start + n}, "
                    f"{ids.shape[0]} were given"
                )
            self._cursor[layer] = start + n
            return ids[start : start + n]
        if ids.shape[0] != batch:  # (batch, seq, k): consume seq positions of every row
            raise RoutingError(f"replay ids have batch {ids.shape[0]} but the forward has batch {batch}")
        if start + seq > ids.shape[1]:
            raise RoutingError(
                f"replay ran out of recorded positions: layer {layer} needs {start + seq}, {ids.shape[1]} were given"
            )
        self._cursor[layer] = start + seq
        return ids[:, start : start + seq].reshape(batch * seq, -1)

    def _remember(self, layer: int, hidden: torch.Tensor, forced: torch.Tensor) -> None:
        self._memo[layer].append((_fingerprint(hidden), forced))

    def _recall(self, layer: int, hidden: torch.Tensor) -> torch.Tensor:
        self._recalled = True
        key = _fingerprint(hidden)
        memo = self._memo[layer]
        for k, forced in reversed(memo):
            if k == key:
                return forced
        for k, forced in reversed(memo):  # not bitwise equal (e.g. nondeterministic GPU kernels)
            if k[0] == key[0]:
                return forced
        raise RoutingError(
            f"MoE layer {layer} was recomputed in backward (activation checkpointing) but no forward "
            "under this replay routed tokens of that shape"
        )

    @property
    def consumed(self) -> int:
        """Tokens (or positions, for 4-D ids) consumed so far by the first MoE layer."""
        return self._cursor[0]

    def __enter__(self) -> RoutingReplay:
        if any(getattr(getattr(b.gate, _ATTR, None), "forcer", None) is not None for b in self.blocks):
            raise RoutingError("a RoutingReplay is already active on this model; they do not nest")
        for layer, block in enumerate(self.blocks):
            _attach(block).forcer = (self, layer)
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        for block in self.blocks:
            state: _State | None = getattr(block.gate, _ATTR, None)
            if state is not None and state.forcer is not None and state.forcer[0] is self:
                state.forcer = None
                _detach_if_idle(state)
        checkpointing = self._model.training and (
            getattr(self._model, "is_activation_checkpointing", None)  # transformers >= 5.2x
            if hasattr(type(self._model), "is_activation_checkpointing")
            else getattr(self._model, "is_gradient_checkpointing", False)
        )
        if exc_type is None and checkpointing and any(self._memo) and not self._recalled:
            # Backward after this block would recompute layers with FREE routing: wrong gradients.
            raise RoutingError(
                "gradient checkpointing is on, so backward re-runs the routers: call loss.backward() "
                "inside the `with RoutingReplay(...)` block"
            )
        self._memo = [[] for _ in self.blocks]
