"""The terminal display of a run: a rich progress bar with the latest step's figures on a TTY,
plain one-line messages otherwise (or nothing, for `progress = "off"`).

    with RunDisplay("auto", total_steps=40) as display:
        display.say("bootstrap: 336 transcripts")
        display.step(1, record)          # a metrics record of the pipeline
"""

from __future__ import annotations

import sys
from typing import Any, Literal


def step_line(step: int, total: int, r: dict[str, Any]) -> str:
    """One human line for a step record."""
    lag = r.get("policy_version_lag", {})
    return (
        f"step {step}/{total} v{r.get('version', '?')}: reward {r['reward']['mean']:.2f} "
        f"success {r['success_rate']:.0%} failed {r.get('failed', 0)} lag {lag.get('mean', 0):.1f} "
        f"tok/s {r.get('tokens_per_s', 0):.0f} train {r.get('train_s', 0):.1f}s "
        f"idle {r.get('trainer_idle_fraction', 0):.0%}"
    )


class RunDisplay:
    def __init__(self, mode: Literal["auto", "rich", "plain", "off"] = "auto", total_steps: int = 0) -> None:
        if mode == "auto":
            mode = "rich" if sys.stdout.isatty() else "plain"
        self.mode = mode
        self.total = total_steps
        self._progress: Any = None
        self._task: Any = None
        self._console: Any = None

    def __enter__(self) -> RunDisplay:
        if self.mode == "rich":
            from rich.console import Console

            self._console = Console()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_steps()

    def say(self, text: str) -> None:
        if self.mode == "off":
            return
        if self._console is not None:
            self._console.print(text, highlight=False, markup=False)
        else:
            print(text, flush=True)

    def start_steps(self, done: int) -> None:
        if self.mode != "rich":
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("[bold]RL"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            TextColumn("{task.description}"), console=self._console,
        )  # fmt: skip
        self._progress.start()
        self._task = self._progress.add_task("waiting for the first groups", total=self.total, completed=done)

    def step(self, step: int, record: dict[str, Any]) -> None:
        line = step_line(step, self.total, record)
        if self._progress is not None:
            short = f"reward {record['reward']['mean']:.2f}  success {record['success_rate']:.0%}"
            self._progress.update(self._task, completed=step, description=short)
            self._progress.console.print(line, highlight=False, markup=False)
        elif self.mode != "off":
            print(line, flush=True)

    def stop_steps(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
