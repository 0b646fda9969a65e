"""The report of a specialize run: before / after on held-out with 90% intervals, turns and tokens
per solved episode, hack flags, wall time per step, cost, and the commands that serve the result.

The verdict comes from `stats.verdict` on the paired bootstrap interval of the difference: the
report calls the result better only when the whole interval lies above 0, and says so in words
when it does not.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

from inhabit.orchestrator.specialize.state import STEPS, RunState
from inhabit.orchestrator.specialize.stats import difference_interval, verdict, wilson

__all__ = ["build_report", "render_report"]


def _side(res: dict[str, Any]) -> dict[str, Any]:
    s = res["summary"]
    lo, hi = wilson(res["successes"], res["episodes"])
    k = s.get("k")
    return {
        "success_rate": s["success_rate"], "interval90": [lo, hi], "successes": res["successes"],
        "episodes": res["episodes"], "tasks": s["tasks"], "pass@1": s.get("pass@1"), "k": k,
        f"pass@{k}": s.get(f"pass@{k}"), "mean_turns": s["mean_turns"],
        "turns_per_solved": s.get("turns_per_solved"), "tokens_per_solved": s.get("tokens_per_solved"),
        "parse_rate": s["parse"]["rate"], "flags": s.get("flags", {}), "causes": s.get("causes", {}),
    }  # fmt: skip


def build_report(inp: Any, state: RunState, run: Path) -> dict[str, Any]:
    from inhabit.orchestrator.specialize.steps import device_line

    tasks, base, final = state.result("tasks"), state.result("baseline"), state.result("final")
    boot, rl = state.result("bootstrap"), state.result("rl")
    before = _side(base)
    after = _side(final) if "summary" in final else None
    if after is not None:
        interval = difference_interval(base["per_task"], final["per_task"], seed=inp.cfg.seed)
    else:
        interval = {"tasks": 0, "difference": 0.0, "low": 0.0, "high": 0.0, "level": 0.9}
    word = verdict(interval) if after is not None else "not measured (nothing was trained)"
    if word == "better":
        claim = (f"better: held-out success {before['success_rate']:.1%} -> {after['success_rate']:.1%}, "  # type: ignore[index]
                 f"difference {interval['difference']:+.1%} (90% interval {interval['low']:+.1%} .. "
                 f"{interval['high']:+.1%})")  # fmt: skip
    elif after is None:
        claim = "not better: no trained model was evaluated"
    else:
        claim = (f"NOT called better ({word}): difference {interval['difference']:+.1%}, 90% interval "
                 f"{interval['low']:+.1%} .. {interval['high']:+.1%}"
                 + (" holds 0" if interval["low"] <= 0 <= interval["high"] else ""))  # fmt: skip
    if final.get("accepted") is False and after is not None:
        claim += "; the gate refused the trained model, so model/ holds MODEL unchanged"
    wall = {n: state.step(n).get("elapsed_s", 0.0) for n in STEPS if state.step(n)}
    total = sum(wall.values())
    model_dir = run / "model"
    repo = shlex.quote(str(inp.repo.resolve())) if inp.repo.is_dir() else "PATH/TO/YOUR/CHECKOUT"
    return {
        "format": 1,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "repo": str(inp.repo), "model": str(inp.model), "run_dir": str(run),
        "budget_s": inp.budget_s,
        "tasks": {"built": tasks.get("built"), "train": len(tasks.get("train", [])),
                  "held_out": len(tasks.get("held_out", [])), "modules": tasks.get("modules", {}),
                  "env_id": tasks.get("env_id")},
        "bootstrap": {k: v for k, v in boot.items() if k != "note"},
        "rl": {k: v for k, v in rl.items() if k != "note"},
        "gate": {"accepted": final.get("accepted"), "tolerance": final.get("tolerance")},
        "before": before, "after": after,
        "difference": interval, "verdict": word, "claim": claim,
        "hack_flags": {"baseline": before["flags"], "rl": rl.get("flags", {}),
                       "final": after["flags"] if after else {}},
        "wall_s": wall, "total_wall_s": round(total, 1),
        "cost": {"device": device_line(), "device_hours": round(total / 3600, 3)},
        "serve": f"inhabit serve --model {shlex.quote(str(model_dir))}",
        "agent": f"inhabit agent --repo {repo} --model http://127.0.0.1:8000/v1 --task 'Fix the failing test'",
    }  # fmt: skip


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.1%}"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def render_report(rep: dict[str, Any]) -> list[str]:
    """The report as terminal lines."""
    b, a = rep["before"], rep["after"] or {}
    k = b.get("k")
    lines = [
        "",
        f"held-out ({b['tasks']} tasks x {b['episodes'] // max(1, b['tasks'])} samples; "
        f"{rep['tasks']['held_out']} held-out tasks from {sum(v == 'held-out' for v in rep['tasks']['modules'].values())} modules)",
        f"  {'':22}{'before':>12}{'after':>12}",
        f"  {'success':22}{_pct(b['success_rate']):>12}{_pct(a.get('success_rate')):>12}",
        f"  {'90% interval':22}{'{}..{}'.format(*tuple(_pct(x) for x in b['interval90'])):>12}"
        f"{('{}..{}'.format(*tuple(_pct(x) for x in a['interval90']))) if a else '-':>12}",
        f"  {f'pass@{k}':22}{_pct(b.get(f'pass@{k}')):>12}{_pct(a.get(f'pass@{k}')):>12}",
        f"  {'turns per solved':22}{_num(b['turns_per_solved']):>12}{_num(a.get('turns_per_solved')):>12}",
        f"  {'tokens per solved':22}{_num(b['tokens_per_solved']):>12}{_num(a.get('tokens_per_solved')):>12}",
        f"  {'turns parsing as calls':22}{_pct(b['parse_rate']):>12}{_pct(a.get('parse_rate')):>12}",
        f"verdict: {rep['claim']}",
        "RL: " + (f"{rep['rl'].get('steps')} steps, {rep['rl'].get('training', 'training not recorded')}" if rep["rl"].get("ran") else "did not run"),
        "hack flags: " + (", ".join(f"{side} {f}x{n}" for side, fl in rep["hack_flags"].items() for f, n in fl.items()) or "none"),
        "wall time: " + ", ".join(f"{n} {s / 60:.1f} min" for n, s in rep["wall_s"].items())
        + f"; cost {rep['cost']['device_hours']:.2f} device-hours on {rep['cost']['device']}",
        f"serve the result:   {rep['serve']}",
        f"use it on the repo: {rep['agent']}",
        f"report page:        inhabit view {rep['run_dir']}",
    ]  # fmt: skip
    return lines
