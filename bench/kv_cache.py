"""Benchmark of the embedded engine's KV memory: peak RSS at long concurrent requests, and the share of
prompt tokens an episode's later turns take from the prefix cache.

    .venv/bin/python bench/kv_cache.py --model /path/to/smollm2-135m-instruct --dtype bfloat16

1. `--concurrent` (16) requests of `--prompt-tokens` (4,000) prompt tokens each (random token ids,
   no two sharing a prefix) and `--new-tokens` (64) completion tokens, submitted together. The
   peak RSS of this process (ru_maxrss: model, KV cache, prefill activations, everything) against
   the goal (<= 3 GB), beside the peak bytes of KV tensors the engine held and the budget.
2. `--episodes` (8) multi-turn episodes of `--turns` (4) turns, run concurrently: turn t's
   prompt is turn t-1's prompt + completion + an observation (as the harness builds them). The
   share of prompt tokens served from the prefix cache, the tokens prefilled, and the wall time,
   beside the same episodes on an engine with `prefix_cache = false`.

Writes bench/results/kv_cache.json. The load average is printed with the results: on a shared
machine it moves the times, not the memory or the hit share.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from inhabit.inference.config import EngineConfig
from inhabit.inference.embedded import EmbeddedEngine
from inhabit.inference.engine import GenerationRequest, SamplingParams

RSS_GOAL_GB = 3.0
SYSTEM = (
    "You are a coding agent working in a Python repository. Call tools to read files, run the "
    "tests and edit code; finish when the tests pass.\n"
)
OBSERVATION = (
    "\n<observation>\n$ python -m pytest -q\n..F.\nFAILED tests/test_calc.py::test_add\n</observation>\n"
)


def _peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9  # KiB on Linux


async def _long_requests(engine: EmbeddedEngine, args) -> dict:
    rng = random.Random(0)
    vocab = engine.vocab_size
    reqs = [
        GenerationRequest(
            [rng.randrange(100, vocab) for _ in range(args.prompt_tokens)],
            SamplingParams(max_tokens=args.new_tokens, temperature=0.8, seed=i),
        )
        for i in range(args.concurrent)
    ]
    t0 = time.perf_counter()
    outs = await engine.generate(reqs)
    wall = time.perf_counter() - t0
    stats = engine.stats()
    return {
        "requests": len(outs),
        "tokens_generated": sum(len(o.token_ids) for o in outs),
        "errors": sum(o.error is not None for o in outs),
        "wall_s": wall,
        "peak_kv_gb": stats["peak_kv_bytes"] / 1e9,
        "preemptions": stats["preemptions"],
        "peak_rss_gb": _peak_rss_gb(),
    }


async def _episodes(engine: EmbeddedEngine, tok, args) -> dict:
    observation = tok(OBSERVATION, add_special_tokens=False)["input_ids"]

    async def episode(i: int) -> None:
        task = f"Task {i}: the function add in calc.py returns a - b; make tests/test_calc.py pass.\n"
        prompt = tok(SYSTEM + task, add_special_tokens=False)["input_ids"]
        for turn in range(args.turns):
            sp = SamplingParams(max_tokens=args.turn_tokens, temperature=0.8, seed=100 * i + turn)
            (out,) = await engine.generate([GenerationRequest(prompt, sp)])
            prompt = prompt + out.token_ids + observation

    before = engine.stats()
    t0 = time.perf_counter()
    await asyncio.gather(*(episode(i) for i in range(args.episodes)))
    wall = time.perf_counter() - t0
    after = engine.stats()
    prompt_tokens = after["prompt_tokens"] - before["prompt_tokens"]
    cached = after["cached_prompt_tokens"] - before["cached_prompt_tokens"]
    return {
        "prompt_tokens": prompt_tokens,
        "cached_prompt_tokens": cached,
        "hit_share": cached / prompt_tokens if prompt_tokens else 0.0,
        "prefilled_tokens": after["prefilled_tokens"] - before["prefilled_tokens"],
        "wall_s": wall,
    }


async def main(args) -> None:
    console = Console()
    cfg = EngineConfig(
        dtype=args.dtype,
        kv_cache_gb=args.kv_cache_gb,
        max_batch_size=args.max_batch_size,
        num_threads=args.threads,
        stop_at_eos=False,
    )
    load = os.getloadavg()
    results: dict = {"model": args.model, "dtype": args.dtype, "kv_cache_gb": args.kv_cache_gb}
    if args.concurrent:
        engine = EmbeddedEngine.from_path(args.model, cfg)
        results["model_loaded_rss_gb"] = _peak_rss_gb()
        try:
            results["long"] = await _long_requests(engine, args)
        finally:
            await engine.close()
    if args.episodes:
        for name, prefix in (("episodes_cached", True), ("episodes_uncached", False)):
            engine = EmbeddedEngine.from_path(args.model, cfg.model_copy(update={"prefix_cache": prefix}))
            try:
                results[name] = await _episodes(engine, engine.tokenizer, args)
            finally:
                await engine.close()
    results["load_average"] = [load, os.getloadavg()]

    table = Table(title=f"KV cache, {Path(args.model).name}, {args.dtype}, kv_cache_gb={args.kv_cache_gb:g}")
    table.add_column("measure")
    table.add_column("value", justify="right")
    if "long" in results:
        r = results["long"]
        name = f"{args.concurrent} x {args.prompt_tokens}+{args.new_tokens} tokens"
        table.add_row("RSS after model load (GB)", f"{results['model_loaded_rss_gb']:.2f}")
        table.add_row(f"{name}: peak RSS (GB)", f"{r['peak_rss_gb']:.2f}")
        table.add_row(f"{name}: peak KV tensors (GB)", f"{r['peak_kv_gb']:.2f}")
        table.add_row(
            f"{name}: wall s / preemptions / errors",
            f"{r['wall_s']:.0f} / {r['preemptions']} / {r['errors']}",
        )
    for name in ("episodes_cached", "episodes_uncached"):
        if name in results:
            r = results[name]
            label = f"{args.episodes} episodes x {args.turns} turns, prefix cache {'on' if name.endswith('_cached') else 'off'}"
            table.add_row(
                f"{label}: prompt tokens from cache",
                f"{r['cached_prompt_tokens']}/{r['prompt_tokens']} ({r['hit_share']:.0%})",
            )
            table.add_row(
                f"{label}: tokens prefilled / wall s", f"{r['prefilled_tokens']} / {r['wall_s']:.0f}"
            )
    console.print(table)
    console.print(f"load average (1, 5, 15 min) at start {load}, at end {results['load_average'][1]}")
    if "long" in results:
        rss = results["long"]["peak_rss_gb"]
        verdict = "met" if rss <= RSS_GOAL_GB else "not met"
        console.print(
            f"goal: peak RSS <= {RSS_GOAL_GB:g} GB at {args.concurrent} concurrent {args.prompt_tokens + args.new_tokens}-token requests: {verdict} ({rss:.2f} GB)"
        )
    else:
        console.print(f"goal: peak RSS <= {RSS_GOAL_GB:g} GB: not measured")
    out = Path(__file__).parent / "results" / "kv_cache.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, help="Hugging Face model folder")
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--kv-cache-gb", type=float, default=4.0)
    parser.add_argument("--max-batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--concurrent", type=int, default=16, help="long requests (0: skip)")
    parser.add_argument("--prompt-tokens", type=int, default=4000)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--episodes", type=int, default=8, help="multi-turn episodes (0: skip)")
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--turn-tokens", type=int, default=48)
    asyncio.run(main(parser.parse_args()))
