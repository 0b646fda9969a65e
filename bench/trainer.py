"""Benchmark the RL train step against a plain next-token (SFT) step on the same tokens.

Workload (the issue's sizing point): a dense-5m model (vocab 4096), 8 sequences of 512 tokens,
the second half of each a generated completion (loss tokens). Measured, median over `--reps`:

* baseline: `model(input_ids, labels=...)` cross-entropy over every position, backward, AdamW step
  (what a plain fine-tuning step costs);
* rl: `Trainer.train_step` (logprobs of the generated tokens only, clipped loss with TIS, metrics),
  one micro-batch, then with `micro_batch_tokens` = 1024 (four micro-batches, gradient accumulation);
* moe-2m rl with router replay on vs off (the replay overhead).

Ratio = time / baseline (wall and CPU time of this process) (below 1: the RL step is cheaper, as it projects only the loss positions
onto the vocabulary). Tokens/s counts every forwarded token. Timings on the shared 2-core
machine are noisy; compare ratios within one run.

    .venv/bin/python bench/trainer.py [--reps 3] [--threads 1]

Prints a rich table and writes bench/results/trainer.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from inhabit.models.tiny import build_tiny_model
from inhabit.trainer.config import TrainerConfig
from inhabit.trainer.samples import Sample
from inhabit.trainer.trainer import Trainer

ROWS, LENGTH, VOCAB = 8, 512, 4096


def samples(routes: tuple[int, int, int] | None = None) -> list[Sample]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(ROWS):
        mask = torch.zeros(LENGTH, dtype=torch.bool)
        mask[LENGTH // 2 :] = True
        r = None
        if routes is not None:
            layers, k, experts = routes
            r = torch.stack([torch.randperm(experts, generator=g)[:k] for _ in range(LENGTH * layers)])
            r = r.view(LENGTH, layers, k)
        out.append(
            Sample(
                input_ids=torch.randint(10, VOCAB, (LENGTH,), generator=g),
                loss_mask=mask,
                behaviour_logprobs=torch.where(mask, -8.3, 0.0),
                versions=torch.where(mask, 0, -1),
                advantage=1.0 if i % 2 else -1.0,
                routed_experts=r,
            )
        )
    return out


def timed(fn, reps: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median (wall seconds, CPU seconds of this process) over `reps` calls after a warm-up.
    CPU time is the steadier figure on a shared machine (other processes' load does not count)."""
    fn()
    walls, cpus = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return statistics.median(walls), statistics.median(cpus)


def sft_step(model, opt, ids: torch.Tensor) -> None:  # type: ignore[no-untyped-def]
    labels = ids.clone()
    labels[:, : LENGTH // 2] = -100
    loss = model(input_ids=ids, labels=labels, use_cache=False).loss
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def main(reps: int, threads: int | None) -> dict:
    if threads:
        torch.set_num_threads(threads)
    data = samples()
    ids = torch.stack([s.input_ids for s in data])
    rows: list[tuple[str, tuple[float, float]]] = []

    model = build_tiny_model("dense-5m", vocab_size=VOCAB, seed=0).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    base = timed(lambda: sft_step(model, opt, ids), reps)
    rows.append(("dense-5m SFT step (baseline)", base))
    for budget in (4096, 1024):
        trainer = Trainer(
            build_tiny_model("dense-5m", vocab_size=VOCAB, seed=0), TrainerConfig(micro_batch_tokens=budget)
        )
        rows.append(
            (
                f"dense-5m RL train_step, micro_batch_tokens={budget}",
                timed(lambda t=trainer: t.train_step(data), reps),
            )
        )
    moe_data = samples(routes=(2, 2, 8))
    for replay in (False, True):
        trainer = Trainer(
            build_tiny_model("moe-2m", vocab_size=VOCAB, seed=0), TrainerConfig(router_replay=replay)
        )
        rows.append(
            (
                f"moe-2m RL train_step, replay={'on' if replay else 'off'}",
                timed(lambda t=trainer: t.train_step(moe_data), reps),
            )
        )

    tokens = ROWS * LENGTH
    table = Table(
        title=f"train step on {ROWS}x{LENGTH} tokens (median of {reps}; threads={torch.get_num_threads()})"
    )
    for col in ("step", "wall s", "cpu s", "tokens/s (wall)", "ratio vs SFT (wall)", "ratio vs SFT (cpu)"):
        table.add_column(col)
    results = []
    for name, (wall, cpu) in rows:
        table.add_row(
            name,
            f"{wall:.3f}",
            f"{cpu:.3f}",
            f"{tokens / wall:,.0f}",
            f"{wall / base[0]:.2f}x",
            f"{cpu / base[1]:.2f}x",
        )
        results.append(
            {
                "step": name,
                "wall_s": wall,
                "cpu_s": cpu,
                "tokens_per_s": tokens / wall,
                "ratio_wall": wall / base[0],
                "ratio_cpu": cpu / base[1],
            }
        )
    Console(width=150).print(table)
    return {"rows": ROWS, "length": LENGTH, "threads": torch.get_num_threads(), "results": results}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    out = main(args.reps, args.threads)
    path = Path(__file__).parent / "results" / "trainer.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")
