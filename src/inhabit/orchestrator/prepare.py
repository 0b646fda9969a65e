"""Everything a run needs before its first step: tasks, tokenizer and the starting model folder.

For `tasks.source = "quickstart"` or `"multistep"` the task family is generated into
`<run_dir>/cache/tasks-*`, and with `model.bootstrap.steps > 0` the model (built, or loaded from
`model.path` when `model.bootstrap.from_path`, e.g. a midtrained one; without it a folder is the
policy as it is) is trained on the family's scripted expert's transcripts
(through the real harness, on the train split only, or its first `bootstrap.share`) and saved to
`<run_dir>/cache/model-*`.
Both are keyed by the settings that shape them and reused when present, so a second run skips
straight to RL; a run from nothing builds them (minutes on a CPU).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhabit.errors import ConfigError, OrchestratorError
from inhabit.log import get_logger
from inhabit.orchestrator.config import ModelConfig, RunConfig
from inhabit.sandbox.base import SandboxProvider
from inhabit.tasks.task import Task, load_task

log = get_logger(__name__)

EXPERT_FILE = "expert_transcripts.jsonl"
"""In a bootstrapped model folder: the expert's transcripts it was trained on, one per line."""


@dataclass
class Prepared:
    model_dir: Path
    train: list[Task]
    held_out: list[Task]
    info: dict[str, Any]


def _key(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:12]


def _load_dir(path: str | None) -> list[Task]:
    if not path:
        return []
    root = Path(path)
    if not root.is_dir():
        raise OrchestratorError(f"task folder {root} does not exist")
    tasks = [load_task(p) for p in sorted(root.iterdir()) if (p / "task.toml").is_file()]
    if not tasks:
        raise OrchestratorError(f"{root} holds no task directories (subfolders with task.toml)")
    return tasks


def _quickstart_tasks(cfg: RunConfig, cache: Path) -> tuple[list[Any], list[Task], list[Task], list[Any]]:
    from inhabit.taskgen.families.quickstart import generate, split_tasks, write_quick_task

    tc = cfg.tasks
    qts = generate(tc.count, tc.seed)
    root = cache / f"tasks-{_key(tc.count, tc.seed, 'v1')}"
    if not (root / ".done").exists():
        shutil.rmtree(root, ignore_errors=True)
        for qt in qts:
            write_quick_task(root, qt)
        (root / ".done").write_text("ok\n")
    q_train, q_held = split_tasks(qts, tc.held_out)
    train = [load_task(root / q.id) for q in q_train]
    held = [load_task(root / q.id) for q in q_held]
    return q_train, train, held, q_held


def _multistep_tasks(cfg: RunConfig, cache: Path) -> tuple[list[Any], list[Task], list[Task]]:
    """(generated train tasks, train, held-out): the held-out split is its own packages' stream."""
    from inhabit.taskgen.families.multistep import generate, write_multistep_tasks

    tc = cfg.tasks
    ms_train = generate(tc.count - tc.held_out, tc.seed, "train", tc.long_share)
    ms_held = generate(tc.held_out, tc.seed, "held-out", tc.long_share)
    root = cache / f"tasks-{_key('multistep', tc.count, tc.held_out, tc.seed, tc.long_share, 'v1')}"
    if not (root / ".done").exists():
        shutil.rmtree(root, ignore_errors=True)
        write_multistep_tasks(root / "train", ms_train)
        write_multistep_tasks(root / "held-out", ms_held)
        (root / ".done").write_text("ok\n")
    train = [load_task(root / "train" / t.id) for t in ms_train]
    held = [load_task(root / "held-out" / t.id) for t in ms_held]
    return ms_train, train, held


def model_tokenizer(mc: ModelConfig) -> Any:
    """The tokenizer of a model built from `mc` (`model.tokenizer`)."""
    from inhabit.models.tokenizer import default_tokenizer
    from inhabit.orchestrator.quickstart.bootstrap import quickstart_native_tokenizer, quickstart_tokenizer

    if mc.tokenizer == "quickstart-native":
        return quickstart_native_tokenizer()
    return quickstart_tokenizer() if mc.tokenizer == "quickstart" else default_tokenizer()


def build_start_model(mc: ModelConfig) -> tuple[Any, Any]:
    """(model, tokenizer) of a tiny model built from `mc.preset` or `mc.spec` with random init; the
    vocabulary is the tokenizer's, rounded up to a multiple of 64."""
    from inhabit.models.tiny import build_tiny_model

    tok = model_tokenizer(mc)
    spec = mc.preset if mc.preset is not None else mc.spec
    assert spec is not None, "ModelConfig allows a built model only with a preset or a spec"
    vocab = max(len(tok), 64)
    vocab = (vocab + 63) // 64 * 64
    return build_tiny_model(spec, vocab_size=vocab, seed=mc.init_seed), tok


def prepare(
    cfg: RunConfig, provider: SandboxProvider, say: Callable[[str], None] = lambda s: None
) -> Prepared:
    cache = Path(cfg.run_dir) / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {}
    q_train: list[Any] = []
    if cfg.tasks.source == "quickstart":
        q_train, train, held, _ = _quickstart_tasks(cfg, cache)
    elif cfg.tasks.source == "multistep":
        q_train, train, held = _multistep_tasks(cfg, cache)
    else:
        train, held = _load_dir(cfg.tasks.dir), _load_dir(cfg.tasks.held_out_dir)
    say(f"tasks: {len(train)} train, {len(held)} held-out")
    mc = cfg.model
    if mc.bootstraps and cfg.tasks.source == "dir":
        raise OrchestratorError(
            "model.bootstrap needs a generated family, tasks.source = 'quickstart' or 'multistep' "
            "(their scripted experts write the transcripts)"
        )
    if mc.path is not None and not mc.bootstraps:  # the folder is the policy (bootstrap.from_path off)
        return Prepared(_model_folder(mc.path, mc.chat_template, cache, say), train, held, info)
    key = _key(
        _model_key_fields(mc),
        _folder_digest(mc.path) if mc.path is not None else None,
        cfg.engine.max_model_len if cfg.tasks.source == "multistep" else None,
        cfg.tasks.model_dump() if mc.bootstraps else None,
        cfg.harness.model_dump(),
        "v2",  # v2: the multistep expert edits the shortest unique text
    )
    out = cache / f"model-{key}"
    if (out / ".done").exists():
        say(f"model: reusing {out}")
        info |= json.loads((out / ".done").read_text() or "{}")
        return Prepared(out, train, held, info)
    info = _build_model(cfg, provider, q_train, train, out, say)
    return Prepared(out, train, held, info)


def _model_key_fields(mc: ModelConfig) -> dict[str, Any]:
    """`mc` as the model's cache key sees it: bootstrap switches added later are left out while
    off, so a folder built before they existed is still found."""
    data = mc.model_dump()
    for late in ("rename", "copy_drill", "drill_mix", "grep"):
        # a switch of a bootstrap that does not run (steps 0) changes nothing either
        if not data["bootstrap"][late] or (late != "copy_drill" and not data["bootstrap"]["steps"]):
            del data["bootstrap"][late]
    return data


def _folder_digest(path: str) -> str:
    """A digest of a model folder's files (names, sizes, times): a changed start model rebuilds."""
    files = sorted(p for p in Path(path).rglob("*") if p.is_file())
    return _key([(str(p.relative_to(path)), p.stat().st_size, p.stat().st_mtime_ns) for p in files])


def _model_folder(path: str, template_file: str | None, cache: Path, say: Callable[[str], None]) -> Path:
    """The user's model folder, checked; with `model.chat_template`, a copy that carries that
    template (weights linked, not copied). The harness renders every turn through the template,
    so a folder without one (a base model) stops here, in one line, rather than in every rollout."""
    from inhabit.models.loading import check_model_folder, load_tokenizer

    folder = Path(path)
    check_model_folder(folder)
    if template_file is None:
        if not getattr(load_tokenizer(folder), "chat_template", None):
            raise ConfigError(
                f"{folder} has no chat template (none in tokenizer_config.json or chat_template.jinja): "
                "set model.chat_template to a Jinja template file in the style the model was trained on"
            )
        return folder
    template = Path(template_file)
    if not template.is_file():
        raise ConfigError(f"model.chat_template: {template} is not a file (give a Jinja chat template)")
    text = template.read_text()
    out = cache / f"model-{_key(str(folder.resolve()), text, 'template-v1')}"
    if not (out / ".done").exists():
        tmp = out.with_name(out.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for f in folder.iterdir():
            if f.name in ("chat_template.jinja", "chat_template.json"):
                continue
            if f.suffix in (".safetensors", ".bin") or f.is_dir():
                (tmp / f.name).symlink_to(f.resolve())
            else:
                shutil.copy2(f, tmp / f.name)
        config_file = tmp / "tokenizer_config.json"
        config = json.loads(config_file.read_text()) if config_file.exists() else {}
        config.pop("chat_template", None)
        config_file.write_text(json.dumps(config, indent=2))
        (tmp / "chat_template.jinja").write_text(text)
        (tmp / ".done").write_text("{}")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    say(f"model: {folder} with the chat template {template}")
    return out


def _build_model(
    cfg: RunConfig,
    provider: SandboxProvider,
    q_train: list[Any],
    train: list[Task],
    out: Path,
    say: Callable[[str], None],
) -> dict[str, Any]:
    from inhabit.models.tiny import count_parameters, save_model_folder

    mc = cfg.model
    if cfg.threads:  # torch's thread count is per OS thread, and prepare may run in a worker thread
        import torch

        torch.set_num_threads(cfg.threads)
    t0 = time.monotonic()
    if mc.path is not None:
        from inhabit.models.loading import load_model

        model, tok = load_model(mc.path)
        say(f"model: starting from {mc.path}")
    else:
        model, tok = build_start_model(mc)
    vocab = model.config.vocab_size
    info: dict[str, Any] = {
        "parameters": str(count_parameters(model)),
        "tokenizer_s": round(time.monotonic() - t0, 2),
    }
    say(f"model: {info['parameters']} parameters, vocabulary {vocab}")
    if mc.bootstrap.copy_drill:
        from inhabit.orchestrator.quickstart.copydrill import timed_drill

        info |= timed_drill(model, tok, mc.bootstrap.copy_drill, mc.init_seed, say)
    if mc.bootstrap.steps:
        from inhabit.orchestrator.quickstart.bootstrap import bootstrap_extras, train_bootstrap

        t1 = time.monotonic()
        window = cfg.engine.max_model_len or int(model.config.max_position_embeddings)
        trajs, examples = expert_examples(cfg, provider, q_train, train, tok, window)
        info["expert_transcripts"] = len(trajs)
        info["expert_examples"] = len(examples)
        info["expert_s"] = round(time.monotonic() - t1, 2)
        say(
            f"bootstrap: {len(trajs)} expert transcripts ({len(examples)} context segments) through the "
            f"harness in {info['expert_s']:.0f} s"
        )
        t2 = time.monotonic()
        bc = mc.bootstrap
        draws, mix = bootstrap_extras(tok, trajs, bc, window, mc.init_seed)
        if draws is not None:  # the same examples, names drawn afresh at each draw (quickstart.renaming)
            examples = draws.examples
        # The trainer's memory settings hold for the bootstrap too: a 30-layer model's whole batch
        # of 4k-token transcripts, layers not recomputed, took a multistep bootstrap to 19 GB.
        checkpointing = cfg.trainer.activation_checkpointing and hasattr(
            model, "activation_checkpointing_enable"
        )
        if checkpointing:
            model.activation_checkpointing_enable({"use_reentrant": False})
        losses = train_bootstrap(
            model, examples, steps=bc.steps, batch_size=bc.batch_size, lr=bc.lr, seed=mc.init_seed,
            pad_id=int(tok.pad_token_id or 0), draw=draws.draw if draws is not None else None,
            aux_loss=mix.loss if mix is not None else None, bf16=cfg.trainer.precision == "bf16-mixed",
            micro_batch_tokens=cfg.trainer.micro_batch_tokens,
            on_step=lambda s, loss: say(
                f"bootstrap step {s + 1}/{bc.steps}: loss {loss:.3f}"
                + (f", drill copied {mix.accuracy[-1]:.0%}" if mix is not None else "")
            ) if (s + 1) % max(1, bc.steps // 10) == 0 else None,
        )  # fmt: skip
        if checkpointing:
            model.activation_checkpointing_disable()
        info["bootstrap_memory"] = {
            "micro_batch_tokens": cfg.trainer.micro_batch_tokens,
            "activation_checkpointing": checkpointing,
        }
        if draws is not None:
            info["renamed_draws"], info["rename_too_long"] = draws.renamed, draws.kept
        if mix is not None:  # whether the copying survived: the mixed rows' accuracy, early and late
            head, tail = mix.accuracy[:20], mix.accuracy[-20:]
            info["drill_mix_first_accuracy"] = round(sum(head) / len(head), 4)
            info["drill_mix_final_accuracy"] = round(sum(tail) / len(tail), 4)
        info["bootstrap_s"] = round(time.monotonic() - t2, 2)
        info["bootstrap_final_loss"] = round(sum(losses[-10:]) / len(losses[-10:]), 4)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_model_folder(model, tok, tmp)
    if mc.bootstrap.steps:  # the data the bootstrap saw, for an SFT baseline (bench/learning.py)
        (tmp / EXPERT_FILE).write_text("".join(t.to_json() + "\n" for t in trajs))
    (tmp / ".done").write_text(json.dumps(info))
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return info


def _fresh_name_tasks(cfg: RunConfig, count: int) -> list[tuple[Any, Path]]:
    """(generated task, its folder) of `count` train-domain tasks under made-up names, written
    once under the run's cache (`model.bootstrap.fresh_names`)."""
    from inhabit.taskgen.families.multistep import generate, write_multistep_tasks

    tc = cfg.tasks
    tasks = generate(count, tc.seed, "train", tc.long_share, fresh_names=True)
    root = Path(cfg.run_dir) / "cache" / f"fresh-{_key(count, tc.seed, tc.long_share, 'v1')}"
    if not (root / ".done").exists():
        shutil.rmtree(root, ignore_errors=True)
        write_multistep_tasks(root, tasks)
        (root / ".done").write_text("ok\n")
    return [(t, root / t.id) for t in tasks]


def expert_examples(
    cfg: RunConfig,
    provider: SandboxProvider,
    q_train: list[Any],
    train: list[Task],
    tokenizer: Any,
    window: int,
) -> tuple[list[Any], list[tuple[list[int], list[bool]]]]:
    """(transcripts, training examples) of the family's scripted expert on the first
    `bootstrap.share` of the train split: one example per transcript for the quickstart (its
    episodes never summarize), one per context segment for multistep (summary segments included);
    `window` is the context window of the model that will imitate it (where the expert summarizes)."""
    from inhabit.orchestrator.quickstart.bootstrap import transcript_example, transcript_examples

    bc = cfg.model.bootstrap
    k = max(1, round(bc.share * len(train)))
    pairs = [(q, Path(t.root)) for q, t in zip(q_train[:k], train[:k], strict=True)]
    if cfg.tasks.source == "multistep":
        from inhabit.taskgen.families.multistep_expert import ExpertStyle, multistep_transcripts

        if bc.fresh_names:
            pairs += _fresh_name_tasks(cfg, round(bc.fresh_names * k))

        window = min(cfg.harness.context_budget or window, window)
        style = ExpertStyle(grep=bc.grep)
        seed = cfg.model.init_seed
        trajs = asyncio.run(
            multistep_transcripts(pairs, provider, cfg.harness, tokenizer, window, seed=seed, style=style)
        )
        return trajs, [e for t in trajs for e in transcript_examples(tokenizer, t)]
    from inhabit.taskgen.families.quickstart_expert import expert_transcripts

    trajs = asyncio.run(
        expert_transcripts(pairs, provider, cfg.harness, careless=bc.careless, seed=cfg.model.init_seed)
    )
    return trajs, [transcript_example(tokenizer, t) for t in trajs]
