"""The tables `inhabit online simulate` prints: one per seed (a line per version) and a summary.

Acceptance is accepted / answered among the version's live sessions with its Wilson 95% interval;
"true" is the share of all its sessions whose hidden tests pass (noise-free, silent users included).
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def version_table(report: dict[str, Any]) -> Table:
    table = Table(title=f"seed {report['seed']}: versions ({report['wall_s']:.0f} s)")
    cols = ("version", "parent", "status", "trained on", "gate", "sessions", "acceptance", "95% CI", "true")
    for col in cols:
        table.add_column(col)
    for v in report["versions"]:
        if v["gate_success"] is None:
            gate = "-"
        else:
            verdict = "pass" if v["gate_passed"] else "REFUSED"
            base = "" if v["gate_deployed"] is None else f" vs {_pct(v['gate_deployed'])}"
            gate = f"{_pct(v['gate_success'])}{base} ({verdict})" if base else _pct(v["gate_success"])
        ci = v["acceptance_ci"]
        table.add_row(
            "-" if v["version"] is None else str(v["version"]),
            "-" if v["parent"] is None else str(v["parent"]),
            v["status"],
            str(v["trained_on"]),
            gate,
            str(v["sessions"]),
            "-" if not v["answered"] else f"{v['accepted']}/{v['answered']} = {_pct(v['acceptance'])}",
            "-" if ci is None else f"[{_pct(ci[0])}, {_pct(ci[1])}]",
            _pct(v["true_success"]),
        )
    return table


def summary_table(result: dict[str, Any]) -> Table:
    table = Table(title="online simulation: first vs last served version")
    cols = (
        "seed",
        "versions",
        "acceptance",
        "true success",
        "rose",
        "shipped but gate should refuse",
        "trained",
    )
    for col in cols:
        table.add_column(col)
    for r in result["seeds"]:
        table.add_row(
            str(r["seed"]),
            f"v{r['first_version']} -> v{r['last_version']}",
            f"{_pct(r['acceptance_first'])} -> {_pct(r['acceptance_last'])}",
            f"{_pct(r['true_first'])} -> {_pct(r['true_last'])}",
            "yes" if r["acceptance_rose"] else "no",
            ", ".join(map(str, r["shipped_but_should_be_refused"])) or "none",
            str(r["episodes_trained"]),
        )
    return table


def print_report(result: dict[str, Any], console: Console) -> None:
    for r in result["seeds"]:
        console.print(version_table(r))
        console.print(
            f"  {r['sessions']} sessions, {r['answered']} answered ({r['flipped']} answers flipped); "
            f"rated sessions consumed by a cycle: {r['rated_consumed']}, left in the pool: "
            f"{r['rated_in_pool']}",
            highlight=False,
        )
    console.print(summary_table(result))
