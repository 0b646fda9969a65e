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

With `--model DIR` (a real model folder, e.g. the imported SmolLM2-135M-Instruct), instead: LoRA
(rank 8, alpha 16, every linear projection) against full fine-tuning, in fp32 and in bf16
(`precision = "bf16-mixed"`; the transformers rows run under the same bf16 autocast), each as
inhabit's `Trainer.train_step` and as a plain transformers step (`model(ids, labels=ids)`, backward,
clip, AdamW; peft's `get_peft_model` for LoRA) on the same `--rows` x `--length` random tokens,
every token a loss token. Each configuration runs in a process of its own, so its peak RSS is its
own. Reported: median step time (wall and CPU), tokens/s, peak RSS, and the share of the matmul
roofline: model FLOPs per step (6 x matmul parameters per token for full fine-tuning, 4 x for
LoRA, which computes no weight gradient for the frozen base; attention scores left out) over the
step time, against the best rate of a timed 2048^3 `torch.matmul` in that dtype measured in the
same run. Also the bytes one policy version costs in the weight store: the adapter alone (bf16)
against the published bf16 delta of a LoRA step and of a full fine-tuning step (measured in the
inhabit runs of the first of `--dtypes`). Each configuration's figures are printed as a JSON line
as it ends, and kept in bench/results/trainer_lora.partial.json. Goals: inhabit's
bf16 step >= 50% of the bf16 roofline; >= 1.5x the transformers step of the same method and dtype.
Writes bench/results/trainer_lora.json.

    .venv/bin/python bench/trainer.py --model models/smollm2-135m-instruct [--rows 4 --length 512 --reps 2] [--dtypes bf16]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
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


ROOFLINE_GOAL, SPEEDUP_GOAL = 0.5, 1.5
LORA_BENCH = {"rank": 8, "alpha": 16.0}


def matmul_roofline(dtype: torch.dtype, n: int = 2048, reps: int = 5) -> float:
    """Best FLOP/s of an n x n x n torch.matmul in `dtype` over `reps` timed calls."""
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    torch.matmul(a, b)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        torch.matmul(a, b)
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def matmul_parameters(model) -> int:  # type: ignore[no-untyped-def]
    """Parameters a token multiplies by: every linear layer's weight, the LM head included (the
    embedding lookup is not a matmul, even when the LM head shares its matrix)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def real_samples(rows: int, length: int, vocab: int) -> list[Sample]:
    g = torch.Generator().manual_seed(0)
    mask = torch.ones(length, dtype=torch.bool)
    mask[0] = False  # token 0 is predicted by nothing
    return [
        Sample(
            input_ids=torch.randint(10, vocab, (length,), generator=g),
            loss_mask=mask,
            behaviour_logprobs=torch.where(mask, -10.8, 0.0),
            versions=torch.where(mask, 0, -1),
            advantage=1.0 if i % 2 else -1.0,
        )
        for i in range(rows)
    ]


def measure_config(
    kind: str, method: str, dtype: str, model_dir: str, rows: int, length: int, reps: int, sizes: bool
) -> dict:
    """One configuration, in a process of its own (its peak RSS is its own)."""
    import resource

    from inhabit.models.loading import load_model

    model, _ = load_model(model_dir)
    model = model.to(torch.float32).train()
    flops_per_token = (6 if method == "full" else 4) * matmul_parameters(model)
    data = real_samples(rows, length, model.config.vocab_size)
    out: dict = {"kind": kind, "method": method, "dtype": dtype, "flops_per_token": flops_per_token}
    if kind == "inhabit":
        lora = LORA_BENCH if method == "lora" else None
        precision = "bf16-mixed" if dtype == "bf16" else "fp32"
        lr = 2e-4 if lora else 1e-5  # the usual rates of each (they set the size of a delta)
        cfg = TrainerConfig(lr=lr, precision=precision, micro_batch_tokens=rows * length, lora=lora)
        trainer = Trainer(model, cfg)
        params = trainer.model
        wall, cpu = timed(lambda: trainer.train_step(data), reps)
        if sizes:
            out.update(publish_sizes(trainer, data))
    else:
        if method == "lora":
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(
                model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", bias="none")
            )
        params = model
        opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
        ids = torch.stack([s.input_ids for s in data])

        def step() -> None:
            ctx = torch.autocast("cpu", dtype=torch.bfloat16) if dtype == "bf16" else contextlib.nullcontext()
            with ctx:
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            loss.backward()
            torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        wall, cpu = timed(step, reps)
    out["trainable"] = sum(p.numel() for p in params.parameters() if p.requires_grad)
    out.update(wall_s=wall, cpu_s=cpu, peak_rss_gb=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20)
    return out


def publish_sizes(trainer: Trainer, data: list[Sample]) -> dict:
    """Bytes in the weight store of one version after a step: the bf16 delta the publisher writes
    (the merged model for LoRA), the full snapshot, and for LoRA the adapter alone in bf16."""
    from inhabit.weights.publish import Publisher

    with tempfile.TemporaryDirectory() as tmp:
        pub = Publisher(tmp)
        full = pub.publish(trainer.state_dict_for_engine(), trainer.version)
        trainer.train_step(data)
        delta = pub.publish(trainer.state_dict_for_engine(), trainer.version)
    sizes = {"snapshot_bytes": full.encoded_bytes, "delta_bytes": delta.encoded_bytes}
    if trainer.config.lora is not None:
        from inhabit.trainer.lora import adapter_state_dict

        sizes["adapter_bytes"] = sum(t.numel() * 2 for t in adapter_state_dict(trainer.model).values())
    return sizes


def lora_vs_full(
    model_dir: str, rows: int, length: int, reps: int, threads: int | None, dtypes: list[str]
) -> dict:
    import multiprocessing
    import os

    if threads:
        torch.set_num_threads(threads)
    ctx = multiprocessing.get_context("spawn")
    names = {"fp32": "float32", "bf16": "bfloat16"}
    roof = {d: matmul_roofline(getattr(torch, names[d])) for d in dtypes}
    print("matmul roofline (GFLOP/s):", {d: round(r / 1e9, 1) for d, r in roof.items()}, flush=True)
    configs = [(k, m, d) for d in dtypes for m in ("lora", "full") for k in ("inhabit", "transformers")]
    results = []
    partial = Path(__file__).parent / "results" / "trainer_lora.partial.json"
    partial.parent.mkdir(parents=True, exist_ok=True)
    for kind, method, dtype in configs:
        sizes = kind == "inhabit" and dtype == dtypes[0]  # the store's bytes, once per method
        with ctx.Pool(1) as pool:
            res = pool.apply(measure_config, (kind, method, dtype, model_dir, rows, length, reps, sizes))
        print(json.dumps(res), flush=True)  # each configuration as it ends (a long run may be cut short)
        results.append(res)
        partial.write_text(json.dumps({"roofline_flops": roof, "results": results}, indent=2))
    for d in dtypes:  # the better of before and after
        roof[d] = max(roof[d], matmul_roofline(getattr(torch, names[d])))
    tokens = rows * length
    by = {(r["kind"], r["method"], r["dtype"]): r for r in results}
    table = Table(
        title=f"{Path(model_dir).name}: train step on {rows}x{length} tokens (median of {reps}; "
        f"threads={torch.get_num_threads()}; load {os.getloadavg()[0]:.1f}); matmul roofline "
        + ", ".join(f"{d} {r / 1e9:.0f}" for d, r in roof.items())
        + " GFLOP/s"
    )
    for col in (
        "step",
        "trainable",
        "wall s",
        "cpu s",
        "tokens/s",
        "peak RSS GB",
        "roofline share",
        "vs transformers",
    ):
        table.add_column(col)
    for r in results:
        r["tokens_per_s"] = tokens / r["wall_s"]
        r["roofline_share"] = r["flops_per_token"] * tokens / r["wall_s"] / roof[r["dtype"]]
        peer = by[("transformers", r["method"], r["dtype"])]
        r["speedup_vs_transformers"] = peer["wall_s"] / r["wall_s"]
        table.add_row(
            f"{r['kind']} {r['method']} {r['dtype']}",
            f"{r['trainable'] / 1e6:.2f}M",
            f"{r['wall_s']:.2f}",
            f"{r['cpu_s']:.2f}",
            f"{r['tokens_per_s']:,.0f}",
            f"{r['peak_rss_gb']:.2f}",
            f"{r['roofline_share']:.1%}",
            f"{r['speedup_vs_transformers']:.2f}x",
        )
    Console(width=160).print(table)
    lora, full = by[("inhabit", "lora", dtypes[0])], by[("inhabit", "full", dtypes[0])]
    print(
        f"weight store per version (bf16): adapter {lora['adapter_bytes'] / 1e6:.2f} MB; delta of a LoRA step "
        f"(merged) {lora['delta_bytes'] / 1e6:.1f} MB; delta of a full step {full['delta_bytes'] / 1e6:.1f} MB; "
        f"full snapshot {full['snapshot_bytes'] / 1e6:.1f} MB"
    )
    goals = []
    for method in ("full", "lora") if "bf16" in dtypes else ():
        r = by[("inhabit", method, "bf16")]
        share, speed = r["roofline_share"], r["speedup_vs_transformers"]
        goals.append({"method": method, "roofline_share": share, "speedup": speed})
        print(
            f"goal: inhabit {method} bf16 step >= {ROOFLINE_GOAL:.0%} of roofline: "
            f"{'met' if share >= ROOFLINE_GOAL else 'NOT met'} ({share:.1%})"
        )
        print(
            f"goal: inhabit {method} bf16 step >= {SPEEDUP_GOAL}x transformers + AdamW: "
            f"{'met' if speed >= SPEEDUP_GOAL else 'NOT met'} ({speed:.2f}x)"
        )
    return {
        "model": model_dir, "rows": rows, "length": length, "reps": reps, "threads": torch.get_num_threads(),
        "roofline_flops": roof, "results": results, "goals": goals, "load_average": os.getloadavg(),
    }  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--data-parallel", action="store_true", help="1 vs 2 trainer processes instead")
    parser.add_argument(
        "--model", default=None, help="a model folder: LoRA vs full fine-tuning on it instead"
    )
    parser.add_argument("--rows", type=int, default=4, help="--model: sequences per step")
    parser.add_argument("--length", type=int, default=512, help="--model: tokens per sequence")
    parser.add_argument(
        "--dtypes", default="bf16,fp32", help="--model: bf16, fp32 or both (the first: store bytes)"
    )
    args = parser.parse_args()
    if args.model:
        out = lora_vs_full(
            args.model, args.rows, args.length, args.reps, args.threads, args.dtypes.split(",")
        )
    else:
        out = data_parallel(args.reps) if args.data_parallel else main(args.reps, args.threads)
    name = "trainer_lora.json" if args.model else "trainer_dp.json" if args.data_parallel else "trainer.json"
    path = Path(__file__).parent / "results" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    print(f"wrote {path}")
