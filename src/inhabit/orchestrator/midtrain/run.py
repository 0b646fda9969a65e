"""`midtrain(cfg, resume=...)`: one midtraining run, what `inhabit midtrain CONFIG` calls.

    corpus (built, or from corpus.sources into <run_dir>/corpus)
        train split -> TokenStream (seeded order per epoch, end of text between documents)
                    -> batch_size x seq_len tokens -> lm_sample x batch_size -> Trainer.sft_step
        held-out    -> fixed_sequences (eval_sequences x seq_len, the same set all run)
                    -> Trainer.sft_measure: NLL per token, perplexity = exp(NLL)
    every step:      a record in metrics.jsonl (train NLL, lr, grad norm, tokens/s; held-out NLL and
                     perplexity at step 0, every eval_every steps and at the last step)
    checkpoints:     <run_dir>/checkpoints/vNNNNNN every checkpoint_every steps and at the end, the
                     stream's position in `trainer.data_state`; `--resume` continues from the newest
                     with the same losses as a run that was never stopped
    at the end:      <run_dir>/model, a servable Hugging Face folder with its tokenizer
                     (`inhabit train` starts from it with model.path), and summary.json

A fresh (not resumed) run clears the outputs of an earlier run in the same folder and keeps the
corpus it built (rebuilt when the corpus settings change; delete `<run_dir>/corpus` to rebuild it
after installing packages). A resumed run drops the records after its checkpoint from
metrics.jsonl, so the file reads as if the run had never stopped.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import sys
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from inhabit.errors import ConfigError, OrchestratorError
from inhabit.log import get_logger
from inhabit.orchestrator.midtrain.config import SITE_PACKAGES, MidtrainConfig
from inhabit.trainer.corpus import Corpus, CorpusSpec, build_corpus, read_manifest, summary_line

log = get_logger(__name__)

OUTPUTS = ("metrics.jsonl", "tensorboard", "checkpoints", "model", "summary.json")


def site_packages() -> list[Path]:
    """The folders where the running Python's packages are installed (purelib, and platlib if other)."""
    paths = sysconfig.get_paths()
    return [Path(p) for p in dict.fromkeys((paths["purelib"], paths["platlib"])) if Path(p).is_dir()]


def resolve_sources(sources: list[str]) -> list[Path]:
    """`corpus.sources` with `@site-packages` expanded."""
    out: list[Path] = []
    for s in sources:
        out += site_packages() if s == SITE_PACKAGES else [Path(s).expanduser()]
    return list(dict.fromkeys(p.resolve() for p in out))  # as the manifest records them


def corpus_for(cfg: MidtrainConfig, display: Display) -> Corpus:
    """The run's corpus: `corpus.path`, or one built from `corpus.sources` (reused when its
    settings match)."""
    if cfg.corpus.path is not None:
        return Corpus.open(cfg.corpus.path)
    sources = resolve_sources(cfg.corpus.sources)
    spec = CorpusSpec.model_validate(cfg.corpus.model_dump(include=set(CorpusSpec.model_fields)))
    out = Path(cfg.run_dir) / "corpus"
    manifest = read_manifest(out, strict=False)
    if (
        manifest is not None
        and manifest.get("sources") == [str(s) for s in sources]
        and manifest.get("spec") == spec.model_dump(mode="json")
    ):
        display.say(f"corpus: reusing {out}: {summary_line(manifest)}")
        return Corpus(out, manifest)
    display.say(f"corpus: building from {', '.join(map(str, sources))}")
    with display.bar("corpus", "files") as advance:
        manifest = build_corpus(sources, out, spec, progress=advance)
    display.say(f"corpus: {summary_line(manifest)}")
    return Corpus(out, manifest)


def start_model(cfg: MidtrainConfig) -> tuple[Any, Any]:
    """(model, tokenizer) to start from: the `model.path` folder, or a tiny model built from the config."""
    if cfg.model.path is not None:
        from inhabit.models.loading import load_model

        return load_model(cfg.model.path)
    from inhabit.orchestrator.prepare import build_start_model

    return build_start_model(cfg.model)


def separator_id(tokenizer: Any) -> int:
    """The token put between documents: `<|endoftext|>` when the vocabulary has it, else EOS."""
    vocab = tokenizer.get_vocab()
    for token in ("<|endoftext|>", tokenizer.eos_token):
        if token is not None and token in vocab:
            return int(vocab[token])
    raise ConfigError("the tokenizer has neither <|endoftext|> nor an eos_token to separate documents")


def encoder(tokenizer: Any) -> Callable[[str], list[int]]:
    """Text -> token ids without special tokens (the fast backend's own encode when there is one: it
    has no length warning and no Python overhead per call)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return lambda text: backend.encode(text, add_special_tokens=False).ids
    return lambda text: tokenizer.encode(text, add_special_tokens=False)


def midtrain(cfg: MidtrainConfig, *, resume: bool = False) -> dict[str, Any]:
    """Run `cfg` (see module docstring); return the summary."""
    import torch
    import transformers

    from inhabit.observability.metrics import MetricsWriter, read_metrics
    from inhabit.trainer.checkpoint import checkpoint_name, latest_checkpoint
    from inhabit.trainer.lm_data import TokenStream, fixed_sequences, lm_sample
    from inhabit.trainer.trainer import Trainer

    transformers.utils.logging.disable_progress_bar()
    t_start = time.monotonic()
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    run_dir = Path(cfg.run_dir)
    ckpt_root = run_dir / "checkpoints"
    ckpt = latest_checkpoint(ckpt_root) if resume else None
    if resume and ckpt is None:
        raise OrchestratorError(f"--resume: no checkpoint under {ckpt_root}; run without --resume to start")
    run_dir.mkdir(parents=True, exist_ok=True)
    if not resume:
        for name in OUTPUTS:
            p = run_dir / name
            if p.is_dir():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    with Display(cfg.metrics.progress, cfg.steps) as display:
        corpus = corpus_for(cfg, display)
        model, tok = start_model(cfg)
        positions = getattr(model.config, "max_position_embeddings", None)
        if positions is not None and cfg.seq_len > positions:
            raise ConfigError(
                f"seq_len {cfg.seq_len} exceeds the model's {positions} positions; lower seq_len"
            )
        encode, sep = encoder(tok), separator_id(tok)
        held = [
            lm_sample(s)
            for s in fixed_sequences(
                corpus.split("held_out"),
                encode,
                sep,
                count=cfg.eval_sequences,
                seq_len=cfg.seq_len,
                seed=cfg.seed,
            )
        ]
        train_docs = corpus.split("train")
        if not held or len(train_docs) == 0:
            raise OrchestratorError(
                f"corpus {corpus.path}: {len(train_docs)} train files and not one held-out sequence of "
                f"{cfg.seq_len} tokens; raise corpus.held_out or lower seq_len"
            )
        trainer = Trainer(model, cfg.trainer, tokenizer=tok)
        if ckpt is not None:
            trainer.load(ckpt)
            display.say(f"resuming from {ckpt} (step {trainer.steps})")
            _truncate_metrics(run_dir / "metrics.jsonl", trainer.steps)
        stream = TokenStream(train_docs, encode, sep, seed=cfg.seed, state=trainer.data_state or None)

        def evaluate() -> dict[str, float]:
            nll = trainer.sft_measure(held).loss
            return {"held_out_nll": nll, "held_out_ppl": math.exp(min(nll, 700.0))}

        writer = MetricsWriter(
            run_dir, tensorboard=cfg.metrics.tensorboard, wandb=cfg.metrics.wandb,
            wandb_project=cfg.metrics.wandb_project, config=cfg.model_dump(),
        )  # fmt: skip
        try:
            if trainer.steps == 0:
                first = evaluate()
                writer.log(0, first)
                display.say(
                    f"step 0: held-out perplexity {first['held_out_ppl']:.2f} ({len(held)} sequences)"
                )
            display.start(trainer.steps)
            for step in range(trainer.steps + 1, cfg.steps + 1):
                m = trainer.sft_step([lm_sample(stream.take(cfg.seq_len)) for _ in range(cfg.batch_size)])
                trainer.data_state = stream.state()
                record: dict[str, Any] = {
                    "train_nll": m.loss, "lr": m.lr, "grad_norm": m.grad_norm, "tokens": m.tokens,
                    "tokens_per_s": m.tokens_per_s, "step_s": m.step_s, "epochs": stream.epochs,
                }  # fmt: skip
                if step % cfg.eval_every == 0 or step == cfg.steps:
                    record |= evaluate()
                writer.log(step, record)
                display.step(step, record)
                if (cfg.checkpoint_every and step % cfg.checkpoint_every == 0) or step == cfg.steps:
                    trainer.save(ckpt_root / checkpoint_name(trainer.version))
            display.stop()
        finally:
            writer.close()
        model_dir = _export(trainer, run_dir / "model")
        records = read_metrics(run_dir / "metrics.jsonl")
        evals = [r for r in records if "held_out_ppl" in r]
        summary = {
            "run_dir": str(run_dir),
            "model_dir": str(model_dir),
            "steps": trainer.steps,
            "train_tokens": sum(r.get("tokens", 0) for r in records),
            "held_out_sequences": len(held),
            "held_out_ppl_before": evals[0]["held_out_ppl"] if evals else None,
            "held_out_ppl_after": evals[-1]["held_out_ppl"] if evals else None,
            "corpus": str(corpus.path),
            "corpus_counts": corpus.manifest["counts"],
            "wall_s": round(time.monotonic() - t_start, 1),
        }
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return summary


def _export(trainer: Any, out: Path) -> Path:
    """The final model folder, written beside and renamed over `out`."""
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    trainer.export_model(tmp)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def _truncate_metrics(path: Path, last_step: int) -> None:
    """Drop the records after `last_step` (steps a stopped run made after its last checkpoint)."""
    if not path.is_file():
        return
    lines = [ln for ln in path.read_text().splitlines() if ln.strip() and json.loads(ln)["step"] <= last_step]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(ln + "\n" for ln in lines))
    tmp.replace(path)


class Display:
    """The terminal display: a rich progress bar with the latest figures on a TTY, plain lines
    otherwise (one per evaluation and about twenty over the run), or nothing (`progress = "off"`)."""

    def __init__(self, mode: Literal["auto", "rich", "plain", "off"], total: int) -> None:
        self.mode = ("rich" if sys.stdout.isatty() else "plain") if mode == "auto" else mode
        self.total = total
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def say(self, text: str) -> None:
        if self.mode != "off":
            print(text, flush=True)

    def _new_progress(self, label: str) -> Any:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        return Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"),
        )  # fmt: skip

    def bar(self, label: str, unit: str) -> Any:
        """A context manager yielding `advance(done, total)` for a bar of its own (rich mode)."""
        display = self

        class _Bar:
            def __enter__(self) -> Callable[[int, int], None]:
                self.progress = display._new_progress(label) if display.mode == "rich" else None
                if self.progress is None:
                    return lambda done, total: None
                self.progress.start()
                task = self.progress.add_task(unit, total=None)
                return lambda done, total: self.progress.update(task, completed=done, total=total)

            def __exit__(self, *exc: object) -> None:
                if self.progress is not None:
                    self.progress.stop()

        return _Bar()

    def start(self, done: int) -> None:
        if self.mode == "rich":
            self._progress = self._new_progress("midtrain")
            self._progress.start()
            self._task = self._progress.add_task("", total=self.total, completed=done)

    def step(self, step: int, r: dict[str, Any]) -> None:
        held = f" held-out ppl {r['held_out_ppl']:.2f}" if "held_out_ppl" in r else ""
        line = f"step {step}/{self.total}: train nll {r['train_nll']:.3f}{held} lr {r['lr']:.2e} tok/s {r['tokens_per_s']:.0f}"
        if self._progress is not None:
            self._progress.update(self._task, completed=step, description=f"nll {r['train_nll']:.3f}")
            if held:
                self._progress.console.print(line, highlight=False, markup=False)
        elif self.mode == "plain" and (held or step % max(1, self.total // 20) == 0):
            print(line, flush=True)

    def stop(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
