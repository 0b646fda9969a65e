"""The proof that RL adds skill and speed: RL against an equal-compute SFT baseline (issue 15).

Per seed, from one bootstrapped model (configs/multistep.toml: the multistep family, the model
bootstrapped on the sequential scripted expert's transcripts of half the train split), three arms
evaluated on the same held-out split (other packages than the train split's):

    (a) bootstrap   the bootstrapped model as it is
    (b) SFT         (a) trained further on the same expert transcripts, next-token, for as much wall
                    clock as (c)'s RL took (the bootstrap's batch size and learning rate; the cosine
                    spans twice the steps the bootstrap's step rate predicts, the clock stops it)
    (c) RL          (a) plus `inhabit train`'s async RL (the config's steps)

and, for a real pretrained model (configs/smollm2-*.toml: `model.path` with `bootstrap.from_path`),
(0) "imported", the folder as it is before any bootstrap, on the same split (`--imported-only` adds
it to the seeds of an earlier --out).

and each of those with and without `inhabit midtrain` before the bootstrap (the midtrained model
is built once, from the run config's model shape, and shared by the seeds). Reported per arm:
held-out success, mean turns and generated tokens per solved episode, share of action turns with
parallel calls (more than one tool call), summaries per episode. Goals, printed met / not met:
RL beats equal-compute SFT by >= 10 held-out points on every seed; RL cuts mean turns per solved
episode by >= 30% against the bootstrap with success not lower (a model that solves nothing has no
turns per solved episode: not met).

    .venv/bin/python bench/learning.py [--seeds 3] [--midtrain both|off|on] [overrides, e.g. steps=20]

One seed without midtrain (`--seeds 1 --midtrain off`, configs/multistep.toml as shipped) took
about 56 min on the shared 2-core machine: expert 5 min, bootstrap 12, three evaluations of 64
episodes 4-7 each, 8 RL steps 11, the SFT arm as long (docs/results.md). Three seeds with and
without midtrain are six such runs plus the midtraining: about 6 hours.

Every arm runs through the orchestrator's own pieces: `prepare` (tasks, expert, bootstrap, cached
under the run folders), `train` (RL and the held-out evaluations, which write trajectories.jsonl),
`train_bootstrap` (the SFT arm) and `midtrain`. Writes bench/results/learning.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from inhabit.config import load_config
from inhabit.harness.execute import MALFORMED_CALL
from inhabit.observability.progress import RunDisplay
from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.prepare import EXPERT_FILE, prepare
from inhabit.orchestrator.run import train
from inhabit.sandbox import create_provider
from inhabit.types import Trajectory

REPO = Path(__file__).resolve().parents[1]
ARMS = ("imported", "bootstrap", "sft", "rl")  # "imported": a real model's folder before any bootstrap


def _bug_modules(run_dir: Path) -> dict[str, str]:
    """Task id -> the path of its buggy module, from the manifests of the run's generated tasks."""
    out = {}
    for manifest in (run_dir / "cache").glob("tasks-*/*/manifest.jsonl"):
        for line in manifest.read_text().splitlines():
            entry = json.loads(line)
            out[entry["id"]] = entry["bug"]["module"]
    return out


def _package(t: Trajectory) -> str:
    found = re.search(r"the package `([A-Za-z_][A-Za-z0-9_]*)`", t.instruction)
    return found.group(1) if found else "?"


def _read(call: Any, prefix: str) -> bool:
    return call.tool == "read_file" and not call.error and str(call.args.get("path", "")).startswith(prefix)


def arm_stats(run_dir: Path, purpose: str) -> dict[str, Any]:
    """The table's figures over the evaluation rollouts of `purpose` in a run's trajectories.jsonl."""
    trajs = [
        t
        for line in (run_dir / "trajectories.jsonl").read_text().splitlines()
        if (t := Trajectory.from_json(line)).metadata.get("purpose") == purpose
    ]
    solved = [t for t in trajs if t.reward is not None and t.reward >= 1.0]
    bugs = _bug_modules(run_dir)
    episodes = max(1, len(trajs))
    turns = [Counter(c.turn for c in t.tool_calls) for t in trajs]
    action_turns = sum(t.num_turns for t in trajs)
    parallel = sum(sum(n > 1 for n in c.values()) for c in turns)

    def tokens(t: Trajectory) -> int:
        return sum(tt.completion_tokens or 0 for s in t.segments for tt in s.turns)

    return {
        "episodes": len(trajs),
        "success": len(solved) / episodes,
        "turns_per_solved": sum(t.num_turns for t in solved) / len(solved) if solved else None,
        "tokens_per_solved": sum(tokens(t) for t in solved) / len(solved) if solved else None,
        "parallel_turn_share": parallel / max(1, action_turns),
        "summaries_per_episode": sum(len(t.summaries) for t in trajs) / episodes,
        # How far the unsolved get: a file of the task's own package read, the buggy module read,
        # an edit applied (share of episodes).
        "read_package": sum(any(_read(c, _package(t) + "/") for c in t.tool_calls) for t in trajs) / episodes,
        "read_buggy_module": sum(any(_read(c, bugs.get(t.task_id, "?")) for c in t.tool_calls) for t in trajs)
        / episodes,
        "edit_applied": sum(any(c.tool == "edit_file" and not c.error for c in t.tool_calls) for t in trajs)
        / episodes,
        # Calls the harness could not parse (a tag never closed, no tool named): each costs a turn.
        "malformed_calls": sum(c.observation.startswith(MALFORMED_CALL) for t in trajs for c in t.tool_calls)
        / max(1, sum(len(t.tool_calls) for t in trajs)),
        "status": dict(Counter(t.status for t in trajs)),
    }


def with_model(cfg: RunConfig, **changes: Any) -> RunConfig:
    data = cfg.model_dump()
    for key, value in changes.items():
        node = data
        *path, last = key.split(".")
        for p in path:
            node = node[p]
        node[last] = value
    return RunConfig.model_validate(data)


def sft_arm(cfg: RunConfig, model_dir: Path, info: dict[str, Any], seconds: float, out: Path) -> dict:
    """(b): the bootstrapped model trained further on its own expert transcripts for `seconds`."""
    import torch

    from inhabit.models.loading import load_model
    from inhabit.models.tiny import save_model_folder
    from inhabit.orchestrator.quickstart.bootstrap import (
        bootstrap_extras,
        train_bootstrap,
        transcript_examples,
    )

    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    model, tok = load_model(model_dir)
    trajs = [Trajectory.from_json(x) for x in (model_dir / EXPERT_FILE).read_text().splitlines()]
    bc = cfg.model.bootstrap
    window = cfg.engine.max_model_len or int(model.config.max_position_embeddings)
    # The bootstrap's data as the bootstrap saw it: renamed draws and drill rows where it had them
    # (without the drill rows the copying wears away).
    draws, mix = bootstrap_extras(tok, trajs, bc, window, cfg.seed + 1)
    examples = (
        draws.examples if draws is not None else [e for t in trajs for e in transcript_examples(tok, t)]
    )
    # The cosine runs over the steps the bootstrap's step rate predicts; the wall clock is the limit
    # (a step rate measured at another load must not end the arm early: twice the prediction).
    step_s = info["bootstrap_s"] / bc.steps
    steps = max(1, int(2 * seconds / step_s))
    t0 = time.monotonic()
    if cfg.trainer.activation_checkpointing:  # the memory settings of the bootstrap and of RL
        model.activation_checkpointing_enable({"use_reentrant": False})
    losses = train_bootstrap(
        model, examples, steps=steps, batch_size=bc.batch_size, lr=bc.lr, seed=cfg.seed + 1,
        pad_id=int(tok.pad_token_id or 0), time_budget_s=seconds, draw=draws.draw if draws is not None else None,
        aux_loss=mix.loss if mix is not None else None, bf16=cfg.trainer.precision == "bf16-mixed",
        micro_batch_tokens=cfg.trainer.micro_batch_tokens,
    )  # fmt: skip
    if cfg.trainer.activation_checkpointing:
        model.activation_checkpointing_disable()
    save_model_folder(model, tok, out)
    return {"steps": len(losses), "planned_steps": steps, "seconds": round(time.monotonic() - t0, 1),
            "final_loss": round(sum(losses[-10:]) / len(losses[-10:]), 4)}  # fmt: skip


def midtrained_model(cfg: RunConfig, root: Path, steps: int) -> Path:
    """`inhabit midtrain` (configs/midtrain.toml) of the run config's model shape, built once."""
    from inhabit.orchestrator.midtrain.config import MidtrainConfig
    from inhabit.orchestrator.midtrain.run import midtrain

    out = root / "midtrain"
    if (out / "model" / "config.json").exists():
        return out / "model"
    spec = cfg.model.spec.model_dump() if cfg.model.spec else None
    mcfg = load_config(MidtrainConfig, REPO / "configs" / "midtrain.toml", [
        f"run_dir={out}", f"steps={steps}", f"trainer.total_steps={steps}", 'metrics.progress="plain"',
        "metrics.tensorboard=false", f"checkpoint_every={steps}",
    ])  # fmt: skip
    data = mcfg.model_dump()
    data["model"]["spec"] = spec
    data["model"]["tokenizer"] = cfg.model.tokenizer
    summary = midtrain(MidtrainConfig.model_validate(data))
    before, after = summary["held_out_ppl_before"], summary["held_out_ppl_after"]
    print(f"midtrain: {steps} steps, held-out perplexity {before:.1f} -> {after:.1f}")
    return Path(summary["model_dir"])


def real_model(cfg: RunConfig) -> bool:
    """A pretrained folder that the bootstrap starts from (configs/smollm2-*.toml), not a tiny init."""
    return cfg.model.path is not None and cfg.model.bootstrap.from_path


def imported_arm(cfg: RunConfig, root: Path) -> dict[str, Any]:
    """(0): the imported folder as it is, on the same held-out split (a real model only)."""
    imp = with_model(
        cfg, steps=0, run_dir=str(root / "imported"), **{"eval.after": False, "model.bootstrap.steps": 0}
    )
    if not (root / "imported" / "trajectories.jsonl").exists():
        train(imp, display=RunDisplay("plain", 0))
    return arm_stats(root / "imported", "eval:before")


def seed_config(base: RunConfig, seed: int) -> RunConfig:
    """The run config of one seed: the run's, its model's init and its engine's sampling."""
    return with_model(base, seed=seed, **{"model.init_seed": seed, "engine.seed": seed})


def run_seed(base: RunConfig, seed: int, root: Path, start: Path | None) -> dict[str, Any]:
    t0 = time.monotonic()
    cfg = seed_config(base, seed)
    if start is not None:  # bootstrap the midtrained model instead of a random init
        cfg = with_model(cfg, **{"model.path": str(start), "model.spec": None, "model.preset": None,
                                 "model.bootstrap.from_path": True})  # fmt: skip
    cfg = with_model(cfg, run_dir=str(root / "rl"))
    provider = create_provider(cfg.sandbox)
    prepared = prepare(cfg, provider, print)  # the bootstrapped model, cached in the run folder
    boot_s = time.monotonic() - t0
    # Each arm that finished is kept: a seed cut off (killed for memory, Ctrl-C) goes on from the
    # first arm without its results when the same command runs again.
    done = root / "rl" / "summary.json"
    if done.exists() and json.loads(done.read_text()).get("steps") == cfg.steps:
        rl = json.loads(done.read_text())
    else:  # evaluates (a) before and (c) after
        rl = train(cfg, display=RunDisplay("plain", cfg.steps))
    sft_done = root / "sft-model" / "sft.json"
    if sft_done.exists():
        sft = json.loads(sft_done.read_text())
    else:
        sft = sft_arm(cfg, prepared.model_dir, prepared.info, rl["rl_s"], root / "sft-model")
        sft_done.write_text(json.dumps(sft))
    sft_cfg = with_model(cfg, steps=0, run_dir=str(root / "sft"), **{"eval.after": False})
    sft_cfg = with_model(sft_cfg, model={"path": str(root / "sft-model")})
    if not (root / "sft" / "summary.json").exists():
        train(sft_cfg, display=RunDisplay("plain", 0))
    arms = {
        **({"imported": imported_arm(cfg, root)} if real_model(cfg) else {}),
        "bootstrap": arm_stats(root / "rl", "eval:before"),
        "sft": arm_stats(root / "sft", "eval:before"),
        "rl": arm_stats(root / "rl", "eval:after"),
    }
    return {"seed": seed, "arms": arms, "rl_s": rl["rl_s"], "sft": sft, "prepare_s": round(boot_s, 1),
            "prepare": prepared.info, "wall_s": round(time.monotonic() - t0, 1)}  # fmt: skip


def goals(seeds: list[dict[str, Any]]) -> dict[str, bool]:
    beat = all(s["arms"]["rl"]["success"] - s["arms"]["sft"]["success"] >= 0.10 for s in seeds)

    def faster(s: dict[str, Any]) -> bool:
        b, r = s["arms"]["bootstrap"], s["arms"]["rl"]
        if b["turns_per_solved"] is None or r["turns_per_solved"] is None:
            return False
        return r["turns_per_solved"] <= 0.7 * b["turns_per_solved"] and r["success"] >= b["success"]

    return {
        "rl_beats_bootstrap_by_10_points_every_seed": all(
            s["arms"]["rl"]["success"] - s["arms"]["bootstrap"]["success"] >= 0.10 for s in seeds
        ),
        "rl_beats_sft_by_10_points_every_seed": beat,
        "rl_cuts_turns_30pct_every_seed": all(map(faster, seeds)),
    }


def fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def table(variant: str, seeds: list[dict[str, Any]]) -> Table:
    t = Table(title=f"held-out, {variant}")
    for c in ("seed", "arm", "success", "turns/solved", "tokens/solved", "parallel turns", "summaries/ep",
              "read package / buggy module / edit applied", "malformed calls", "vs bootstrap"):  # fmt: skip
        t.add_column(c)
    for s in seeds:
        base = s["arms"]["bootstrap"]
        for arm in (a for a in ARMS if a in s["arms"]):
            a = s["arms"][arm]
            ratio = (
                f"success {a['success'] - base['success']:+.1%}"
                + (f", turns x{a['turns_per_solved'] / base['turns_per_solved']:.2f}"
                   if a["turns_per_solved"] and base["turns_per_solved"] else "")
            )  # fmt: skip
            t.add_row(str(s["seed"]), arm, f"{a['success']:.1%} of {a['episodes']}",
                      fmt(a["turns_per_solved"], ".2f"), fmt(a["tokens_per_solved"], ".0f"),
                      f"{a['parallel_turn_share']:.1%}", f"{a['summaries_per_episode']:.2f}",
                      f"{a['read_package']:.0%} / {a['read_buggy_module']:.0%} / {a['edit_applied']:.0%}",
                      f"{a.get('malformed_calls', 0):.0%}", "-" if arm == "bootstrap" else ratio)  # fmt: skip
    return t


def add_imported_arm(base: RunConfig, root: Path, out: Path, console: Console) -> None:
    """`--imported-only`: the imported arm of each seed of an earlier run, written into its --out."""
    results = json.loads(out.read_text())
    for name, variant in results["variants"].items():
        v = "on" if name == "with midtrain" else "off"
        for s in variant["seeds"]:
            seed_root = root / f"midtrain-{v}" / f"seed-{s['seed']}"
            s["arms"] = {"imported": imported_arm(seed_config(base, s["seed"]), seed_root), **s["arms"]}
        console.print(table(name, variant["seeds"]))
        variant["goals"] = goals(variant["seeds"])
    out.write_text(json.dumps(results, indent=2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "multistep.toml"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--midtrain", choices=("both", "off", "on"), default="both")
    ap.add_argument("--midtrain-steps", type=int, default=300)
    ap.add_argument("--root", default="runs/bench-learning")
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "learning.json"))
    ap.add_argument(
        "--stats", metavar="RUN_DIR", help="print the figures of a run folder's held-out evaluations and stop"
    )
    ap.add_argument(
        "--imported-only",
        action="store_true",
        help="add the imported folder's own evaluation (a real model) to the seeds of an earlier --out, and stop",
    )
    ap.add_argument("overrides", nargs="*", help="dotted overrides of the run config, e.g. steps=20")
    args = ap.parse_args()
    if args.stats:
        for purpose in ("eval:before", "eval:after"):
            print(purpose, json.dumps(arm_stats(Path(args.stats), purpose)))
        return
    base = load_config(RunConfig, Path(args.config), [*args.overrides, 'metrics.progress="plain"'])
    root = Path(args.root)
    console = Console(width=150)
    if args.imported_only:
        add_imported_arm(base, root, Path(args.out), console)
        return
    t0 = time.monotonic()
    load0 = os.getloadavg()
    variants = {"both": ["off", "on"], "off": ["off"], "on": ["on"]}[args.midtrain]
    results: dict[str, Any] = {"config": args.config, "overrides": args.overrides, "variants": {}}
    for v in variants:
        name = "with midtrain" if v == "on" else "without midtrain"
        start = midtrained_model(base, root, args.midtrain_steps) if v == "on" else None
        seeds = [run_seed(base, s, root / f"midtrain-{v}" / f"seed-{s}", start) for s in range(args.seeds)]
        results["variants"][name] = {"seeds": seeds, "goals": goals(seeds)}
        console.print(table(name, seeds))
        for goal, met in goals(seeds).items():
            console.print(f"goal {goal} ({name}): {'MET' if met else 'NOT MET'}")
    results |= {"wall_s": round(time.monotonic() - t0, 1), "load_start": load0, "load_end": os.getloadavg()}
    console.print(f"whole bench: {results['wall_s'] / 60:.1f} min; load average at start "
                  f"{load0[0]:.1f}, at end {results['load_end'][0]:.1f}")  # fmt: skip
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
