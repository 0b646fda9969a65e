"""The multistep family's edit step alone: given the expert's way to the bug, does a model fix it?

An episode of the multistep family chains two skills: finding the buggy line (run the tests, read
the test file and the facade, follow the call into the helper module) and fixing it (an edit_file
call whose `old` is text of the module and whose `new` undoes the bug). Every arm of
bench/learning.py solves 0 held-out tasks, which does not say which skill is missing. This probe
takes the first away: for each task it plays the scripted expert (the transcripts the bootstrap
imitates, summaries where the model's window would overflow) up to its edit turn, gives the model
exactly the context the harness would show it there, samples that turn, runs its calls in a fresh
sandbox of the task and grades the result. Per split (train tasks the bootstrap played, train
tasks it did not, held-out), the share of samples whose turn

    calls edit_file         well formed, any path
    applied                 the call succeeded (its `old` text was found in the file)
    edits the buggy module  an applied edit of the module that holds the bug
    fixes the task          graded reward 1

and, as a control of the probe itself, how many of the expert's own edit turns, run the same way,
fix their task (all of them, or the probe is broken).

    .venv/bin/python bench/edit_probe.py --model FOLDER [--config configs/multistep.toml]
        [--tasks 16] [--samples 2] [--temperature 0.5] [overrides of the run config]

The tasks are the run config's (`[tasks]`; the chosen ones are written to a temporary folder), so a
model bootstrapped by that config meets the same splits; "played" are the first of the train split, which the bootstrap's
expert played (`model.bootstrap.share`). Writes bench/results/edit_probe.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from rich.console import Console
from rich.table import Table

from inhabit.config import load_config
from inhabit.grading.grader import grade
from inhabit.harness.execute import execute_calls
from inhabit.harness.tools import ToolContext
from inhabit.harness.tools.base import workspace_path
from inhabit.models.loading import load_model
from inhabit.models.tokenizer import encode_chat
from inhabit.orchestrator.config import RunConfig
from inhabit.orchestrator.quickstart.bootstrap import action_context
from inhabit.sandbox import create_provider
from inhabit.taskgen.families.multistep import generate, write_multistep_tasks
from inhabit.taskgen.families.multistep_expert import multistep_transcripts
from inhabit.tasks.task import load_task
from inhabit.types import MessageRecord, Trajectory

REPO = Path(__file__).resolve().parents[1]


def context_before_edit(traj: Trajectory) -> tuple[list[MessageRecord], str] | None:
    """(the messages the harness showed before the expert's first edit turn, the expert's own text
    of that turn), or None when the transcript has no edit."""
    edit = next((c for c in traj.tool_calls if c.tool == "edit_file"), None)
    if edit is None:
        return None
    before = 0  # action turns of earlier segments (tool call records number turns episode-wide)
    for seg in traj.segments:
        actions = sum(t.kind == "action" for t in seg.turns)
        if edit.turn < before + actions:
            *messages, turn = action_context(traj, seg, before, turns=edit.turn - before + 1)
            return messages, turn.content
        before += actions
    return None


def sample_turns(model: Any, tokenizer: Any, messages: list[MessageRecord], n: int, temperature: float,
                 max_tokens: int, seed: int) -> list[str]:  # fmt: skip
    """`n` sampled assistant turns after `messages`, each up to the end-of-turn token."""
    ids = torch.tensor([encode_chat(tokenizer, messages, add_generation_prompt=True)])
    end = tokenizer.convert_tokens_to_ids("<|end|>")
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            ids.repeat(n, 1), attention_mask=torch.ones_like(ids).repeat(n, 1), do_sample=True,
            temperature=temperature, top_k=0, top_p=1.0, max_new_tokens=max_tokens, eos_token_id=end,
            pad_token_id=end,
        )  # fmt: skip
    return [tokenizer.decode(row[ids.shape[1] :], skip_special_tokens=True) for row in out]


async def try_turn(task: Any, text: str, provider: Any, cfg: RunConfig, bug_module: str) -> dict[str, bool]:
    """Run one sampled turn's calls in a fresh sandbox of `task`, then grade its workspace."""
    async with await provider.create(task.workspace_dir) as sandbox:
        ctx = ToolContext(sandbox=sandbox, config=cfg.harness, test_command=task.grading.command)
        outcome = await execute_calls(text, ctx)
        edits = [r for r in outcome.records if r.tool == "edit_file"]
        applied = [r for r in edits if not r.error]
        result = await grade(task, sandbox, provider) if applied else None
    return {
        "calls edit_file": bool(edits),
        "applied": bool(applied),
        "edits the buggy module": any(
            workspace_path(str(r.args.get("path", ""))) == bug_module for r in applied
        ),
        "fixes the task": bool(result and result.reward == 1.0),
    }


COLUMNS = ("calls edit_file", "applied", "edits the buggy module", "fixes the task")


async def probe_split(name: str, pairs: list[tuple[Any, Any]], model: Any, tokenizer: Any, cfg: RunConfig,
                      provider: Any, args: argparse.Namespace, say: Any) -> dict[str, Any]:  # fmt: skip
    window = min(cfg.harness.context_budget or cfg.engine.max_model_len, cfg.engine.max_model_len)
    t0 = time.monotonic()
    trajs = await multistep_transcripts(
        [(q, Path(t.root)) for q, t in pairs], provider, cfg.harness, tokenizer, window,
        seed=cfg.model.init_seed, grade=False,
    )  # fmt: skip
    by_id = {t.task_id: t for t in trajs}
    say(f"{name}: {len(trajs)} expert transcripts in {time.monotonic() - t0:.0f} s")
    rows, expert_fixes, contexts = [], 0, 0
    for i, (q, task) in enumerate(pairs):
        traj = by_id.get(task.id)
        found = context_before_edit(traj) if traj is not None else None
        if found is None:
            continue
        messages, expert_text = found
        contexts += 1
        # the control: the expert's own turn, through the same calls and grading, fixes the task
        expert_fixes += (await try_turn(task, expert_text, provider, cfg, q.bug["module"]))["fixes the task"]
        for k, text in enumerate(
            sample_turns(
                model, tokenizer, messages, args.samples, args.temperature, cfg.harness.max_turn_tokens, i
            )
        ):
            row = await try_turn(task, text, provider, cfg, q.bug["module"])
            rows.append({"task": task.id, "sample": k, "text": text, **row})
    n = len(rows)
    out = {"samples": n, **{c: sum(r[c] for r in rows) for c in COLUMNS}, "rows": rows}
    out["expert's turn fixes"] = f"{expert_fixes}/{contexts}"
    say(
        f"{name}: "
        + ", ".join(f"{c} {out[c]}/{n}" for c in COLUMNS)
        + f"; the expert's own turn fixes {expert_fixes}/{contexts}"
    )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a bootstrapped model folder (its tokenizer inside)")
    ap.add_argument("--config", default=str(REPO / "configs" / "multistep.toml"))
    ap.add_argument("--tasks", type=int, default=16, help="tasks per split")
    ap.add_argument("--samples", type=int, default=2)
    ap.add_argument("--temperature", type=float, default=0.5)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "edit_probe.json"))
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    console = Console()
    cfg = load_config(RunConfig, args.config, args.overrides)
    if cfg.tasks.source != "multistep":
        raise SystemExit(f"{args.config}: tasks.source is {cfg.tasks.source!r}; the probe is for multistep")
    torch.set_num_threads(1)
    model, tokenizer = load_model(args.model)
    # the run's own splits: generation is deterministic per (count, seed, split, long_share)
    tc = cfg.tasks
    q_train = generate(tc.count - tc.held_out, tc.seed, "train", tc.long_share)
    q_held = generate(tc.held_out, tc.seed, "held-out", tc.long_share)
    played = max(1, round(cfg.model.bootstrap.share * len(q_train)))
    n = args.tasks
    chosen = {
        "train, played by the bootstrap's expert": q_train[:n],
        "train, not played": q_train[played : played + n],
        "held-out": q_held[:n],
    }
    with tempfile.TemporaryDirectory(prefix="inhabit-edit-probe-") as tmp:
        splits = {}
        for k, (name, qs) in enumerate(chosen.items()):
            roots = write_multistep_tasks(Path(tmp) / str(k), qs)
            splits[name] = [(q, load_task(root)) for q, root in zip(qs, roots, strict=True)]
        provider = create_provider(cfg.sandbox)

        async def run_all() -> dict[str, Any]:
            return {
                name: await probe_split(name, pairs, model, tokenizer, cfg, provider, args, console.print)
                for name, pairs in splits.items()
            }

        results = asyncio.run(run_all())
    table = Table(title=f"the edit turn after the expert's way to the bug: {args.model}")
    table.add_column("split")
    for c in (*COLUMNS, "expert's turn fixes (control)"):
        table.add_column(c, justify="right")
    for name, r in results.items():
        table.add_row(name, *(f"{r[c]}/{r['samples']}" for c in COLUMNS), r["expert's turn fixes"])
    console.print(table)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(
        json.dumps({"model": args.model, "config": args.config, "splits": results}, indent=1)
    )
    console.print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
