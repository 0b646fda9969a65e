"""Benchmark of the models part: router capture/replay cost and benefit, and the tokenizer.

    PYTHONPATH=src .venv/bin/python bench/models.py [--preset moe-37m] [--quick] [--threads N]

Prints three tables and writes bench/results/models.json:

1. Forward throughput (tokens/s) of a tiny MoE model, free routing (the baseline) against the same
   forward under `RoutingCapture` and under `RoutingReplay`; the ratio is against the baseline.
   The three variants run in turns and medians are reported, per wall second and per CPU second
   of this process (the latter is steadier when other jobs share the cores).
2. Rollout/trainer mismatch: sequences sampled in bf16 (the "rollout engine"), scored by the same
   weights in fp32 (the "trainer") with free routing and with the rollout's routing replayed. Mean
   and max absolute token-logprob gap, and the fraction of tokens whose experts differ; for the
   default init (std 0.02, near-uniform logits) and a peakier one (std 0.1, closer to a trained
   model, where a flipped expert moves logprobs a lot).
3. Tokenizer: default-tokenizer training time and characters per token on held-out text (the
   project's own Python sources, which the default corpus does not contain) and on transcripts.

Timings are wall-clock on a shared machine: compare ratios within one run, not across runs.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from inhabit.models.corpus import transcript
from inhabit.models.routing import RoutingCapture, RoutingReplay
from inhabit.models.tiny import build_tiny_model, count_parameters, resolve_spec
from inhabit.models.tokenizer import default_tokenizer, render_chat

RESULTS = Path(__file__).parent / "results" / "models.json"


def _time_interleaved(fns: dict, repeats: int) -> dict[str, tuple[float, float]]:
    """Median (wall, process-CPU) seconds per call; variants run in turns so load drift hits all alike."""
    for fn in fns.values():
        fn()  # warm-up
    wall: dict[str, list[float]] = {k: [] for k in fns}
    cpu: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            w, c = time.perf_counter(), time.process_time()
            fn()
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)
    return {k: (statistics.median(wall[k]), statistics.median(cpu[k])) for k in fns}


def bench_overhead(model, batch: int, seq: int, repeats: int) -> dict:
    ids = torch.randint(10, model.config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    with torch.inference_mode(), RoutingCapture(model) as cap:
        model(ids)
    recorded = cap.calls[0]

    def free():
        with torch.inference_mode():
            model(ids)

    def capture():
        with torch.inference_mode(), RoutingCapture(model):
            model(ids)

    def replay():
        with torch.inference_mode(), RoutingReplay(model, recorded):
            model(ids)

    tokens = batch * seq
    times = _time_interleaved({"free routing": free, "capture": capture, "replay": replay}, repeats)
    return {
        k: {"wall_tokens_per_s": tokens / w, "cpu_tokens_per_s": tokens / c} for k, (w, c) in times.items()
    }


def bench_mismatch(model, batch: int, prompt_len: int, new: int) -> dict:
    """Sample in bf16 with capture, then score in fp32 with free routing and with replay."""
    bf16 = _copy_model(model).to(torch.bfloat16)
    prompts = torch.randint(
        10, model.config.vocab_size, (batch, prompt_len), generator=torch.Generator().manual_seed(1)
    )
    torch.manual_seed(1)
    with torch.inference_mode(), RoutingCapture(bf16) as cap:
        out = bf16.generate(
            prompts,
            max_new_tokens=new,
            min_new_tokens=new,
            do_sample=True,
            top_k=0,
            output_logits=True,
            return_dict_in_generate=True,
            pad_token_id=2,
        )
    seqs = out.sequences
    rollout_lp = torch.log_softmax(torch.stack(out.logits, 1).float(), -1)  # (batch, new, vocab)
    new_ids = seqs[:, prompt_len:]
    rollout = rollout_lp.gather(-1, new_ids[..., None])[..., 0]
    recorded = torch.cat(cap.calls, dim=2)  # (layers, batch, prompt+new-1, k)
    inputs = seqs[:, :-1]
    results = {}
    for name, ctx in (("free", None), ("replay", recorded)):
        with torch.inference_mode(), RoutingCapture(model) as seen:
            if ctx is None:
                logits = model(inputs).logits
            else:
                with RoutingReplay(model, ctx):
                    logits = model(inputs).logits
        lp = torch.log_softmax(logits[:, prompt_len - 1 :].float(), -1).gather(-1, new_ids[..., None])[..., 0]
        gap = (lp - rollout).abs()
        differs = (seen.calls[0].sort(-1).values != recorded.sort(-1).values).any(-1).any(0).float()
        results[name] = {
            "mean_abs_logprob_gap": float(gap.mean()),
            "max_abs_logprob_gap": float(gap.max()),
            "tokens_with_different_experts": float(differs.mean()),
        }
    return results


def _copy_model(model):
    clone = type(model)(model.config)
    clone.load_state_dict(model.state_dict())
    return clone.eval()


def bench_tokenizer() -> dict:
    with tempfile.TemporaryDirectory() as cache:
        t = time.perf_counter()
        tok = default_tokenizer(cache_dir=cache)
        train_s = time.perf_counter() - t
        t = time.perf_counter()
        default_tokenizer(cache_dir=cache)
        cached_s = time.perf_counter() - t
    src = Path(__file__).resolve().parents[1] / "src" / "inhabit"
    code = "\n".join(p.read_text() for p in sorted(src.rglob("*.py")))
    rng = random.Random(99)
    chats = "".join(
        render_chat(tok, [{"role": r, "content": c} for r, c in transcript(rng)]) for _ in range(50)
    )
    return {
        "train_s": train_s,
        "cached_load_s": cached_s,
        "vocab": len(tok),
        "chars_per_token_project_source": len(code) / len(tok(code)["input_ids"]),
        "chars_per_token_transcripts": len(chats) / len(tok(chats, add_special_tokens=False)["input_ids"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="moe-37m")
    parser.add_argument("--quick", action="store_true", help="smaller shapes, fewer repeats")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)  # 1 thread gives steadier ratios on a crowded machine
    console = Console()
    model = build_tiny_model(args.preset, seed=0)
    batch, seq, repeats = (2, 32, 3) if args.quick else (4, 64, 7)
    console.print(f"{args.preset}: {count_parameters(model)}; torch threads {torch.get_num_threads()}")

    overhead = bench_overhead(model, batch, seq, repeats)
    t1 = Table(
        "forward (batch x seq)",
        "tokens/s (wall)",
        "ratio vs free",
        "tokens/CPU-s",
        "ratio vs free",
        title=f"router hooks, {args.preset}",
    )
    base = overhead["free routing"]
    for name, r in overhead.items():
        t1.add_row(
            f"{name} ({batch}x{seq})",
            f"{r['wall_tokens_per_s']:,.0f}",
            f"{r['wall_tokens_per_s'] / base['wall_tokens_per_s']:.2f}x",
            f"{r['cpu_tokens_per_s']:,.0f}",
            f"{r['cpu_tokens_per_s'] / base['cpu_tokens_per_s']:.2f}x",
        )
    console.print(t1)

    mb, mp, mn = (2, 8, 16) if args.quick else (4, 8, 32)
    mismatch = {}
    t2 = Table(
        "fp32 scoring of bf16 samples",
        "mean |dlogp|",
        "max |dlogp|",
        "other experts",
        "max vs free",
        title=f"router replay, {args.preset}, {mb} x {mn} sampled tokens",
    )
    # Random init at std 0.02 gives near-uniform logits; std 0.1 gives peaky, trained-like ones.
    for std in (0.02, 0.1):
        spec = resolve_spec(args.preset).model_copy(update={"initializer_range": std})
        result = bench_mismatch(build_tiny_model(spec, seed=0), mb, mp, mn)
        mismatch[f"init_std_{std}"] = result
        base = result["free"]["max_abs_logprob_gap"]
        for name, r in result.items():
            t2.add_row(
                f"{name}, init std {std}",
                f"{r['mean_abs_logprob_gap']:.4f}",
                f"{r['max_abs_logprob_gap']:.4f}",
                f"{r['tokens_with_different_experts']:.1%}",
                f"{r['max_abs_logprob_gap'] / base:.2f}x",
            )
    console.print(t2)

    tok = bench_tokenizer()
    t3 = Table("tokenizer", "value", title="default tokenizer")
    for k, v in tok.items():
        t3.add_row(k, f"{v:.3f}" if isinstance(v, float) else str(v))
    console.print(t3)

    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps(
            {
                "preset": args.preset,
                "params": vars(count_parameters(model)),
                "threads": torch.get_num_threads(),
                "forward_tokens_per_s": overhead,
                "forward_shape": [batch, seq],
                "mismatch": mismatch,
                "mismatch_shape": {"batch": mb, "prompt": mp, "new": mn},
                "tokenizer": tok,
            },
            indent=2,
        )
    )
    console.print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
