"""`inhabit midtrain` and `inhabit corpus build` (heavy imports stay inside command bodies).

inhabit corpus build .venv/lib/python3.11/site-packages --out corpora/site-py   # any folders
inhabit midtrain configs/midtrain.toml                     # a run from a TOML file
inhabit midtrain configs/midtrain.toml steps=50 seq_len=256
inhabit midtrain configs/midtrain.toml --resume            # continue from the newest checkpoint
"""

from __future__ import annotations

import sys
from pathlib import Path

import typer

corpus_app = typer.Typer(
    name="corpus",
    help="Build text corpora from files on this machine (deduplicated, split by file).",
    no_args_is_help=True,
)


@corpus_app.command("build")
def build(
    sources: list[Path] = typer.Argument(..., help="Folders to walk (symlinks are not followed)."),
    out: Path = typer.Option(..., "--out", help="Corpus folder to write (an existing corpus is replaced)."),
    suffix: list[str] = typer.Option([".py"], "--suffix", help="File name ending to keep (repeatable)."),
    held_out: float = typer.Option(0.05, "--held-out", help="Fraction of files held out, in [0, 1)."),
    seed: int = typer.Option(0, "--seed", help="Split seed: another seed holds out other files."),
    min_bytes: int = typer.Option(1, "--min-bytes", help="Skip smaller files."),
    max_bytes: int = typer.Option(1_000_000, "--max-bytes", help="Skip larger files."),
) -> None:
    """Walk folders, keep files by suffix and size, drop duplicates, split train / held-out by file."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from inhabit.config import validate_config
    from inhabit.trainer.corpus import CorpusSpec, build_corpus, summary_line

    spec = validate_config(
        CorpusSpec,
        {
            "suffixes": suffix,
            "held_out": held_out,
            "seed": seed,
            "min_bytes": min_bytes,
            "max_bytes": max_bytes,
        },
        source="corpus options",
    )
    if not sys.stdout.isatty():  # a bar only where someone watches; logs get the summary line
        manifest = build_corpus(sources, out, spec)
    else:
        with Progress(
            TextColumn("[bold]corpus"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True
        ) as progress:
            task = progress.add_task("files", total=None)
            manifest = build_corpus(
                sources,
                out,
                spec,
                progress=lambda done, total: progress.update(task, completed=done, total=total),
            )
    typer.echo(f"wrote {out}: {summary_line(manifest)}")


def register(app: typer.Typer) -> None:
    """Add this part's commands to the root app."""
    app.add_typer(corpus_app, name="corpus")

    @app.command()
    def midtrain(
        config: Path = typer.Argument(..., help="Midtraining TOML (see configs/midtrain.toml)."),
        overrides: list[str] = typer.Argument(None, help="Dotted overrides: steps=50 trainer.lr=1e-3"),
        resume: bool = typer.Option(
            False, "--resume", help="Continue from the newest checkpoint of run_dir."
        ),
        dry_run: bool = typer.Option(False, "--dry-run", help="Print the resolved config; do nothing."),
    ) -> None:
        """Continued next-token training on a code corpus, with held-out perplexity; resumable."""
        from inhabit.config import load_config
        from inhabit.orchestrator.midtrain.config import MidtrainConfig

        cfg = load_config(MidtrainConfig, config, overrides or [])
        if dry_run:
            typer.echo(cfg.model_dump_json(indent=2))
            return
        from inhabit.orchestrator.midtrain.run import midtrain as run_midtrain

        s = run_midtrain(cfg, resume=resume)
        typer.echo("")
        typer.secho(
            f"held-out perplexity: {s['held_out_ppl_before']:.2f} before -> {s['held_out_ppl_after']:.2f} "
            f"after {s['steps']} steps ({s['train_tokens']:,} train tokens)",
            bold=True,
        )
        typer.echo(
            f"model: {s['model_dir']} (a run config's [model] path = this folder starts inhabit train from it)"
        )
        typer.echo(f"run folder: {s['run_dir']} (metrics.jsonl, checkpoints/, summary.json)")
        typer.echo(f"wall time: {s['wall_s']:.0f} s")
