"""How the embedded engine splits prompts into left-padded prefill batches.

A padded batch costs (rows x longest prompt) token-forwards, plus a fixed cost per forward call
(Python and kernel launches, worth a few dozen tokens of a small model on CPU). Prompts are taken
shortest first; the next prompt joins the current batch when the padding it adds to the rows
already there costs less than starting a new batch would, and the batch stays within the token
budget. For the benchmark's 64 prompts of 6..51 tokens (1,263 tokens) one batch padded to 3,264
token-forwards; this plan makes 6 batches of 1,279 (docs/results.md).
"""

from __future__ import annotations

from collections.abc import Sequence

CALL_COST_TOKENS = 32
"""The fixed cost of one prefill forward, in padded prompt tokens (measured on dense-5m, 1 thread)."""


def plan_prefill(lengths: Sequence[int], budget: int, call_cost: int = CALL_COST_TOKENS) -> list[list[int]]:
    """Indices of `lengths` grouped into batches (each sorted by length, shortest first)."""
    chunks: list[list[int]] = []
    longest = 0
    for i in sorted(range(len(lengths)), key=lambda i: lengths[i]):
        n = lengths[i]
        rows = len(chunks[-1]) if chunks else 0
        if rows and (rows + 1) * n <= budget and rows * (n - longest) <= call_cost:
            chunks[-1].append(i)
        else:
            chunks.append([i])
        longest = n
    return chunks
