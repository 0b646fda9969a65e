"""A copy drill before the bootstrap: the circuit that copies a name out of the context.

A multistep episode is a chain of copies: the test file the instruction names, the module the test
imports, the function the facade calls, the text the edit replaces. A model that cannot copy a
token sequence it has seen earlier in its context can only recall the names of its training data,
which is what the quickstart's model shape did on the held-out packages (docs/results.md,
"Multistep"), with or without made-up names in its transcripts.

Copying is the job of an induction circuit: one head that marks each position with the token
before it, one that finds the earlier occurrence of the current token and reads what followed it.
The drill is the textbook data for it: rows of a random pattern of the tokenizer's lowercase word
pieces (the pieces identifiers are made of) repeated to the row's end, loss only where the pattern
repeats. Nothing but copying predicts those tokens. Measured on the quickstart's model shape (3
layers, 128 wide), the circuit appears abruptly: accuracy on the repeats stays at 0-21% for the
first 2,500-2,800 steps, then reaches 82-87% within the next 400-500 (two runs, docs/results.md);
a drill shorter than that teaches little more than which pieces it draws.

The bootstrap that follows wears the circuit away (measured: 92% of repeats copied after the
drill, 43% over the first 20 mixed steps after 1,500 renamed bootstrap steps). `DrillMix` adds a
few drill rows to every bootstrap step (`model.bootstrap.drill_mix`), so the copying keeps being
trained while the call format is learnt (back to 93% within the next 1,200 steps, docs/results.md).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["DrillMix", "copy_drill", "drill_batch", "drill_pieces"]

PATTERN = (6, 24)
"""Pattern lengths, in tokens (a module path or a function name is 3-12 pieces)."""


def drill_pieces(tokenizer: Any, max_chars: int = 6) -> list[int]:
    """Ids of the vocabulary's lowercase ASCII word pieces of up to `max_chars` characters."""
    tokens = tokenizer.convert_ids_to_tokens(list(range(len(tokenizer))))
    out = [
        i for i, t in enumerate(tokens) if t.isascii() and t.isalpha() and t.islower() and len(t) <= max_chars
    ]
    if len(out) < 16:
        raise ValueError(f"the tokenizer has {len(out)} lowercase word pieces: too few for a copy drill")
    return out


def drill_batch(
    pieces: list[int], rng: random.Random, batch_size: int = 16, length: int = 128
) -> tuple[torch.Tensor, torch.Tensor]:
    """(input ids, targets): each row a random pattern repeated to `length` tokens; the target of
    every position in a repeat is the next token, -100 (no loss) within the first pattern."""
    rows, targets = [], []
    for _ in range(batch_size):
        n = rng.randint(*PATTERN)
        pattern = [rng.choice(pieces) for _ in range(n)]
        row = (pattern * (length // n + 1))[:length]
        rows.append(row)
        # position k predicts token k + 1, which a copy can give once k + 1 >= n
        targets.append([-100] * (n - 1) + row[n:] + [-100])
    return torch.tensor(rows), torch.tensor(targets)


def drill_loss(model: Any, inp: torch.Tensor, tgt: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(mean cross-entropy, share predicted right) of a drill batch: the vocabulary projection only
    where there is a loss, which is most of a step's time otherwise."""
    keep = tgt != -100
    hidden = model.get_decoder()(input_ids=inp).last_hidden_state[keep]
    logits = model.get_output_embeddings()(hidden)
    loss = torch.nn.functional.cross_entropy(logits, tgt[keep])
    with torch.no_grad():
        accuracy = (logits.argmax(-1) == tgt[keep]).float().mean()
    return loss, accuracy


class DrillMix:
    """`rows` drill rows for every bootstrap step: `loss(model)` is added to the step's loss.
    `accuracy` keeps the share of repeats copied right, per step, to show whether the circuit
    survives the bootstrap."""

    def __init__(self, tokenizer: Any, rows: int, seed: int = 0, length: int = 128) -> None:
        self.pieces = drill_pieces(tokenizer)
        self.rows, self.length = rows, length
        self.rng = random.Random(f"drill-mix:{seed}")
        self.accuracy: list[float] = []

    def loss(self, model: Any) -> torch.Tensor:
        inp, tgt = drill_batch(self.pieces, self.rng, self.rows, self.length)
        loss, accuracy = drill_loss(model, inp, tgt)
        self.accuracy.append(accuracy.item())
        return loss


def copy_drill(
    model: Any,
    tokenizer: Any,
    *,
    steps: int,
    batch_size: int = 16,
    length: int = 128,
    lr: float = 3e-3,
    seed: int = 0,
    on_step: Callable[[int, float, float], None] | None = None,
) -> list[tuple[float, float]]:
    """`steps` AdamW updates (constant `lr`, as measured) on drill batches; returns (loss, share of
    repeat tokens predicted right) per step. The model is left in eval mode."""
    rng = random.Random(f"copy-drill:{seed}")
    pieces = drill_pieces(tokenizer)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.98))
    out = []
    for step in range(steps):
        inp, tgt = drill_batch(pieces, rng, batch_size, length)
        loss, accuracy = drill_loss(model, inp, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        out.append((loss.item(), accuracy.item()))
        if on_step is not None:
            on_step(step, *out[-1])
    model.eval()
    return out


def chance_loss(pieces: int) -> float:
    """The drill's loss of a model that knows the pieces but copies nothing: ln(pieces)."""
    return math.log(pieces)


def timed_drill(
    model: Any, tokenizer: Any, steps: int, seed: int, say: Callable[[str], None]
) -> dict[str, Any]:
    """`copy_drill` with a progress line every tenth of the steps; the figures for a run's info."""
    t0 = time.monotonic()
    every = max(1, steps // 10)
    log = copy_drill(
        model, tokenizer, steps=steps, seed=seed,
        on_step=lambda s, loss, acc: say(f"copy drill step {s + 1}/{steps}: loss {loss:.3f}, copied {acc:.0%}")
        if (s + 1) % every == 0 else None,
    )  # fmt: skip
    tail = log[-20:]
    return {
        "copy_drill_s": round(time.monotonic() - t0, 2),
        "copy_drill_final_loss": round(sum(x for x, _ in tail) / len(tail), 4),
        "copy_drill_final_accuracy": round(sum(a for _, a in tail) / len(tail), 4),
    }
