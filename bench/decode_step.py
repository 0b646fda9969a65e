"""Benchmark of one decode step of the embedded engine's lean path on a model folder: projections on
oneDNN-reordered bf16 weights against plain `F.linear`, interleaved in one process.

    .venv/bin/python bench/decode_step.py --model models/smollm2-135m-instruct --rows 1,16

Both variants run the same steps (same token ids, same KV cache contents, `--context` positions
already cached per row) and their logits are checked equal, bit for bit, at every step; each
prints its best milliseconds per step over `--rounds` rounds and the tokens/s that makes (rows per
step / step time). Only the model's forward is timed: no sampling, no scheduling. The load average
is printed with the results; on a shared machine it moves the times, not their ratio's sign.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from inhabit.inference import lean_decode
from inhabit.inference.kv_cache import SlotKVCache
from inhabit.models.loading import load_model


def _run(lean, cfg, n: int, steps: int, context: int) -> tuple[float, torch.Tensor]:
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    kv = SlotKVCache(
        cfg.num_hidden_layers, cfg.num_key_value_heads, head_dim, n, context + steps + 1, dtype=torch.bfloat16
    )
    kv.ensure(n, context + steps + 1)
    gen = torch.Generator().manual_seed(n)
    for store in (kv.keys, kv.values):
        for buf in store:
            buf.copy_(torch.randn(buf.shape, generator=gen).to(buf.dtype))
    kv.lengths[:n] = [context] * n
    ids = torch.randint(100, 1000, (n, 1), generator=gen)
    outs = []
    t0 = time.perf_counter()
    for _ in range(steps):
        rows, pos, kv_len = kv.decode_rows(n)
        mask = kv.decode_mask(pos, kv_len, torch.bfloat16, "cpu")
        logits = lean.forward(ids, rows, pos, mask, kv_len, kv.keys, kv.values)
        kv.commit_decode(n)
        outs.append(logits)
        ids = logits.float().argmax(-1, keepdim=True)
    return (time.perf_counter() - t0) / steps, torch.stack(outs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="Hugging Face model folder (a lean-decode architecture)")
    ap.add_argument("--rows", default="1,16", help="decode batch sizes")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--context", type=int, default=100, help="positions already cached per row")
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    console = Console()
    model, _ = load_model(args.model, dtype="bfloat16")
    if not lean_decode.supports(model) or not lean_decode.packable(model):
        console.print("not measured: this model or CPU has no lean bf16 path on reordered weights")
        return
    packed = lean_decode.LeanDecode(model)
    plain = lean_decode.LeanDecode(model)
    plain.packed, plain.linear = False, torch.nn.functional.linear
    for layer in plain.layers:
        layer.packed = False
        layer.fuse()
    plain._pack_head()
    load = os.getloadavg()
    best: dict[tuple[str, int], float] = {}
    with torch.inference_mode():
        for _ in range(args.rounds):
            for n in (int(r) for r in args.rows.split(",")):
                ref = None
                for name, lean in (("F.linear", plain), ("reordered", packed)):
                    s, out = _run(lean, model.config, n, args.steps, args.context)
                    best[name, n] = min(best.get((name, n), float("inf")), s)
                    if ref is None:
                        ref = out
                    elif not torch.equal(ref, out):
                        raise SystemExit(f"logits differ at {n} rows: the two paths must be bit-equal")
    table = Table(title=f"lean decode step, {Path(args.model).name}, bf16, {args.threads} thread(s)")
    for col in (
        "rows",
        "F.linear ms/step",
        "reordered ms/step",
        "F.linear tok/s",
        "reordered tok/s",
        "speed-up",
    ):
        table.add_column(col, justify="right")
    for n in sorted({n for _, n in best}):
        a, b = best["F.linear", n], best["reordered", n]
        table.add_row(
            str(n), f"{a * 1e3:.1f}", f"{b * 1e3:.1f}", f"{n / a:.1f}", f"{n / b:.1f}", f"{a / b:.2f}x"
        )
    console.print(table)
    console.print(f"logits bit-equal at every step; load average at start {load}, at end {os.getloadavg()}")


if __name__ == "__main__":
    main()
