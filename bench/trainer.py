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

With `--data-parallel`, instead: the same RL step of dense-30m on 16 x 512 tokens in one process
and in two (`trainer.data_parallel = 2`: gloo, FSDP2, this process is rank 0), one torch thread per
process. Reported: wall time and tokens/s (median of `--reps`), the ratio to one process, and the
share of rank 0's step spent in collectives, from one profiled step: the union of the intervals of
FSDP's all-gather and reduce-scatter regions and the c10d calls on rank 0's thread (waiting for the
slower rank counts as collective time). Goal: <= 15%. Writes bench/results/trainer_dp.json.

    .venv/bin/python bench/trainer.py --data-parallel [--reps 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import statistics
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from inhabit.models.tiny import build_tiny_model
from inhabit.trainer.config import TrainerConfig, TrainerRunSettings
from inhabit.trainer.samples import Sample
from inhabit.trainer.trainer import Trainer

ROWS, LENGTH, VOCAB = 8, 512, 4096


def samples(routes: tuple[int, int, int] | None = None, rows: int = ROWS) -> list[Sample]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(rows):
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


COMM = re.compile(r"^(FSDP::all_gather|FSDP::post_backward_reduce|c10d::|_c10d_functional::wait)")
DP_ROWS, DP_GOAL = 16, 0.15


def collective_share(step) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """(wall seconds of one profiled `step()`, share of it inside collectives on this thread)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        t0 = time.perf_counter()
        step()
        wall = time.perf_counter() - t0
    spans = sorted(
        (e.time_range.start, e.time_range.end)
        for e in prof.events()
        if COMM.match(e.name) and e.thread == threading_id(prof)
    )
    covered, end = 0.0, float("-inf")
    for a, b in spans:  # union of (possibly nested) intervals, in microseconds
        if b > end:
            covered += b - max(a, end)
            end = b
    total = max((e.time_range.end for e in prof.events()), default=0) - min(
        (e.time_range.start for e in prof.events()), default=0
    )
    return wall, covered / total if total else 0.0


def threading_id(prof) -> int:  # type: ignore[no-untyped-def]
    """The profiler's id of the thread that ran the step (the one with the optimizer step)."""
    return next(e.thread for e in prof.events() if e.name.startswith("Optimizer.step"))


def data_parallel(reps: int) -> dict:
    from inhabit.models.tiny import save_model_folder
    from inhabit.models.tokenizer import default_tokenizer
    from inhabit.placement.trainer_dist import DistributedTrainer

    torch.set_num_threads(1)
    tok = default_tokenizer()
    data = samples(rows=DP_ROWS)
    tokens = DP_ROWS * LENGTH
    cfg = TrainerConfig(micro_batch_tokens=4096, num_threads=1)
    with tempfile.TemporaryDirectory() as tmp:
        folder = save_model_folder(
            build_tiny_model("dense-30m", vocab_size=len(tok), seed=0), tok, Path(tmp) / "m"
        )
        one = Trainer.from_pretrained(folder, cfg)
        t1 = timed(lambda: one.train_step(data), reps)[0]
        w1, share1 = collective_share(lambda: one.train_step(data))
        two = DistributedTrainer(
            folder, TrainerRunSettings(trainer=cfg.model_copy(update={"data_parallel": 2}), threads=1)
        )
        try:
            t2 = timed(lambda: asyncio.run(two.step(data)), reps)[0]
            w2, share2 = collective_share(lambda: two._step(data))
        finally:
            two.close_sync()
    table = Table(
        title=f"dense-30m RL train_step on {DP_ROWS}x{LENGTH} tokens, 1 thread per process (median of {reps})"
    )
    for col in ("trainer", "wall s", "tokens/s", "ratio vs 1 process", "collectives (profiled step)"):
        table.add_column(col)
    table.add_row("1 process", f"{t1:.2f}", f"{tokens / t1:,.0f}", "1.00x", f"{share1:.1%}")
    table.add_row(
        "2 processes (gloo, FSDP2)", f"{t2:.2f}", f"{tokens / t2:,.0f}", f"{t1 / t2:.2f}x", f"{share2:.1%}"
    )
    Console(width=150).print(table)
    met = share2 <= DP_GOAL
    print(
        f"goal: collectives <= {DP_GOAL:.0%} of a 2-process dense-30m step: {'met' if met else 'NOT met'} ({share2:.1%})"
    )
    return {
        "model": "dense-30m", "rows": DP_ROWS, "length": LENGTH, "threads_per_process": 1, "reps": reps,
        "one_process": {"wall_s": t1, "tokens_per_s": tokens / t1, "profiled_wall_s": w1},
        "two_processes": {"wall_s": t2, "tokens_per_s": tokens / t2, "profiled_wall_s": w2,
                          "collective_share": share2},
        "speedup": t1 / t2, "goal": DP_GOAL, "goal_met": met,
    }  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--data-parallel", action="store_true", help="1 vs 2 trainer processes instead")
    args = parser.parse_args()
    out = data_parallel(args.reps) if args.data_parallel else main(args.reps, args.threads)
    name = "trainer_dp.json" if args.data_parallel else "trainer.json"
    path = Path(__file__).parent / "results" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")
