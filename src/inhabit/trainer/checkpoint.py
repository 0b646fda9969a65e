"""Trainer checkpoints that resume bit for bit, written atomically.

A checkpoint is a folder:

    config.json, generation_config.json, model.safetensors   the model (an ordinary Hugging Face
                                                             folder: `inhabit serve` / the engine
                                                             load it as is), plus the tokenizer
                                                             files when the trainer has one
    optimizer.pt        AdamW and LR-scheduler state dicts (torch.save)
    rng.pt              torch, python `random` and numpy global RNG states
    kl_reference/       with trainer.kl_coef > 0: the KL anchor's starting policy (the weights the
                        run started from, not this checkpoint's), in a folder of its own so that
                        loaders of the model folder never mistake it for model weights
    adapter/            with trainer.lora: the peft adapter (adapter_config.json,
                        adapter_model.safetensors; peft and vLLM load it as is), while the model
                        files above hold the merged weights
    lora_base/          with trainer.lora: the frozen base weights of the projections the adapters
                        wrap (the merged folder no longer holds them), for an exact resume
    trainer_state.json  format, policy version, steps, the caller's data position (`data_state`),
                        the TrainerConfig it was written with; written LAST: a folder without it
                        is not a checkpoint

Atomicity: everything is written (and fsynced) into a hidden sibling folder, which is then
renamed over the target; an existing checkpoint at the target is moved aside first and deleted
after. A crash leaves either the old checkpoint or the new one, never a mix, plus at worst a
`.name.tmp-*` / `.name.old-*` leftover that `latest_checkpoint` ignores.

Data-parallel trainers (distributed.py) write the same folder: every rank takes part in gathering
the full weights and optimizer state, rank 0 writes; on load every rank reads the folder and keeps
its own shard, so the checkpoint does not depend on the number of ranks. The RNG state saved is
rank 0's (every rank restores it; ranks draw the same numbers, as they are seeded alike).

Exactness: weights round-trip through safetensors in fp32 (MoE experts are written in the
per-expert layout and fused again on load, a lossless copy), optimizer state through torch.save,
and the schedule is a function of the update count stored in the scheduler state.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from inhabit.errors import TrainerError
from inhabit.log import get_logger

if TYPE_CHECKING:
    from inhabit.trainer.trainer import Trainer

log = get_logger(__name__)

FORMAT = 1
STATE_FILE = "trainer_state.json"
REFERENCE_FILE = "kl_reference/model.safetensors"
"""Beside, not among, the model's *.safetensors: a folder's loaders read every one at its top."""
_STEP_DIR = re.compile(r"^v(\d+)$")


class CheckpointError(TrainerError):
    """A checkpoint folder is missing, incomplete or does not fit the trainer loading it."""


def checkpoint_name(version: int) -> str:
    """Folder name of the checkpoint of a policy version (`v000012`), as `latest_checkpoint` expects."""
    return f"v{version:06d}"


def latest_checkpoint(root: str | Path) -> Path | None:
    """The complete checkpoint with the highest version under `root` (folders named by
    `checkpoint_name`), or None when there is none."""
    root = Path(root)
    if not root.is_dir():
        return None
    best: tuple[int, Path] | None = None
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and (child / STATE_FILE).is_file() and (best is None or int(m[1]) > best[0]):
            best = (int(m[1]), child)
    return best[1] if best else None


def save_checkpoint(trainer: Trainer, path: str | Path) -> Path:
    """Write `trainer`'s full state to the folder `path` atomically (module docstring)."""
    path = Path(path)
    weights, opt_state = None, trainer.optimizer.state_dict()
    if trainer.dp is not None:  # collectives: every rank gathers, rank 0 writes
        from inhabit.trainer.distributed import full_optimizer_state, full_state_dict

        weights, opt_state = full_state_dict(trainer.model), full_optimizer_state(trainer.optimizer)
        if trainer.dp.rank != 0:
            return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        trainer.export_model(tmp, weights)
        torch.save(
            {"optimizer": opt_state, "scheduler": trainer.scheduler.state_dict()},
            tmp / "optimizer.pt",
        )
        torch.save(
            {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
            tmp / "rng.pt",
        )
        if trainer.config.lora is not None:
            from safetensors.torch import save_file

            from inhabit.trainer import lora

            lora.save_adapter(trainer.model, trainer.config.lora, tmp / lora.ADAPTER_DIR)
            (tmp / lora.BASE_FILE).parent.mkdir()
            save_file(lora.base_weights(trainer.model), str(tmp / lora.BASE_FILE))
        if trainer.reference is not None:  # the KL anchor's starting policy, so a resume anchors to it
            from safetensors.torch import save_model

            (tmp / REFERENCE_FILE).parent.mkdir()
            save_model(trainer.reference, str(tmp / REFERENCE_FILE))
        state = {
            "format": FORMAT,
            "version": trainer.version,
            "steps": trainer.steps,
            "data_state": trainer.data_state,
            "config": trainer.config.model_dump(mode="json"),
        }
        try:
            text = json.dumps(state, indent=2, sort_keys=True)
        except TypeError as e:
            raise CheckpointError(f"trainer.data_state must be JSON-able: {e}") from e
        (tmp / STATE_FILE).write_text(text)
        for f in tmp.rglob("*"):
            _fsync(f)
        _fsync(tmp)
        old = None
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            if old.exists():
                shutil.rmtree(old)
            path.rename(old)
        tmp.rename(path)
        _fsync(path.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def load_checkpoint(trainer: Trainer, path: str | Path) -> dict[str, Any]:
    """Restore `trainer` (built with the same model architecture and config) from `path`."""
    from inhabit.inference.errors import WeightLoadError
    from inhabit.inference.weights_io import copy_into, read_state_dict, to_model_layout

    path = Path(path)
    state_file = path / STATE_FILE
    if not state_file.is_file():
        raise CheckpointError(
            f"{path} is not a complete checkpoint (no {STATE_FILE}); pick another, e.g. latest_checkpoint()"
        )
    state = json.loads(state_file.read_text())
    if state.get("format") != FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {state.get('format')} is not {FORMAT}")
    if trainer.config.lora is not None:
        weights = _load_lora(trainer, path)
    else:
        try:
            weights = to_model_layout(trainer.model, read_state_dict(path))
        except WeightLoadError as e:
            raise CheckpointError(f"{path}: the weights do not fit this model: {e}") from e
        missing = set(trainer.model.state_dict()) - set(weights) - _tied_names(trainer.model)
        if missing:
            raise CheckpointError(
                f"{path}: the checkpoint lacks {len(missing)} weights, e.g. {sorted(missing)[:3]}"
            )
    opt = torch.load(path / "optimizer.pt", map_location=trainer.config.device, weights_only=False)
    if trainer.dp is None:
        if trainer.config.lora is None:
            copy_into(trainer.model, weights)
        trainer.optimizer.load_state_dict(opt["optimizer"])
    else:  # each rank keeps its shard of the full tensors
        from inhabit.trainer.distributed import load_full_state_dict, shard_optimizer_state

        load_full_state_dict(trainer.model, weights)
        trainer.optimizer.load_state_dict(shard_optimizer_state(trainer.optimizer, opt["optimizer"]))
    trainer.scheduler.load_state_dict(opt["scheduler"])
    if trainer.reference is not None:
        if (path / REFERENCE_FILE).is_file():
            from safetensors.torch import load_model

            load_model(trainer.reference, str(path / REFERENCE_FILE))
        else:  # a checkpoint of a run without the anchor: its weights become the reference
            copy_into(trainer.reference, weights)
            log.info(
                "%s has no %s: the KL anchor's reference is this checkpoint's weights", path, REFERENCE_FILE
            )
    rng = torch.load(path / "rng.pt", weights_only=False)
    torch.set_rng_state(rng["torch"])
    random.setstate(rng["python"])
    np.random.set_state(rng["numpy"])
    saved = state.get("config") or {}
    now = trainer.config.model_dump(mode="json")
    changed = sorted(k for k in set(saved) | set(now) if saved.get(k) != now.get(k))
    if changed:  # legitimate (e.g. a new lr for the rest of the run) but worth a line in the log
        log.info("resuming %s with a config that differs in: %s", path, ", ".join(changed))
    trainer.version = int(state["version"])
    trainer.steps = int(state["steps"])
    trainer.data_state = dict(state.get("data_state") or {})
    return state


def _load_lora(trainer: Trainer, path: Path) -> dict[str, torch.Tensor]:
    """Restore a LoRA trainer's base weights and adapter from `path`; return the merged weights
    (the KL anchor's reference when the checkpoint has none)."""
    from inhabit.inference.weights_io import read_state_dict
    from inhabit.trainer import lora

    if (
        not (path / lora.ADAPTER_DIR / "adapter_config.json").is_file()
        or not (path / lora.BASE_FILE).is_file()
    ):
        raise CheckpointError(
            f"{path} was written without trainer.lora (no {lora.ADAPTER_DIR}/ and {lora.BASE_FILE}); "
            "resume it with the [trainer] it was trained with"
        )
    merged = read_state_dict(path)
    base = read_state_dict(path / lora.BASE_FILE)
    wrapped = {lora.base_name(n) for n in trainer.model.state_dict() if ".base_layer." in n}
    everything = {lora.base_name(n) for n in trainer.model.state_dict() if ".lora_" not in n}
    if set(base) != wrapped:
        raise CheckpointError(
            f"{path}: {lora.BASE_FILE} does not hold the projections this trainer's adapters wrap"
        )
    tied = {lora.base_name(n) for n in _tied_names(trainer.model)}
    missing = everything - wrapped - set(merged) - tied
    if missing:
        raise CheckpointError(
            f"{path}: the checkpoint lacks {len(missing)} weights, e.g. {sorted(missing)[:3]}"
        )
    try:
        lora.load_base(trainer.model, {**{n: t for n, t in merged.items() if n not in wrapped}, **base})
        lora.load_adapter(trainer.model, path / lora.ADAPTER_DIR)
    except TrainerError as e:
        raise CheckpointError(f"{path}: {e}") from e
    return merged


def _tied_names(model: Any) -> set[str]:
    """State-dict names that share storage with an earlier name (tied embeddings are saved once)."""
    seen: dict[int, str] = {}
    tied = set()
    for name, t in model.state_dict(keep_vars=True).items():
        key = id(t) if hasattr(t, "full_tensor") else t.data_ptr()  # a DTensor shard: the same object
        if key in seen:
            tied.add(name)
        else:
            seen[key] = name
    return tied


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
