"""One progress display over the steps of `inhabit specialize`: a rich progress table with a row
per step (on a TTY; plain lines otherwise). RL reports through the same display: it is a
`RunDisplay`, so `inhabit train`'s steps move the RL row instead of opening a second live view.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from inhabit.observability.progress import RunDisplay, step_line
from inhabit.orchestrator.specialize.state import STEPS

LABELS = {
    "tasks": "tasks from the repository",
    "baseline": "baseline on held-out",
    "bootstrap": "format bootstrap",
    "rl": "RL on train tasks",
    "final": "held-out after RL (gate)",
    "report": "report",
}


class SpecializeDisplay(RunDisplay):
    def __init__(self, mode: Literal["auto", "rich", "plain", "off"] = "auto") -> None:
        super().__init__(mode, 0)
        self._rows: dict[str, Any] = {}
        self._rl_deadline: float | None = None
        self._depth = 0  # `inhabit train` enters the display again: only the outermost opens it

    def __enter__(self) -> SpecializeDisplay:
        self._depth += 1
        if self._depth > 1:
            return self
        super().__enter__()
        if self.mode == "rich":
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(
                TextColumn("{task.fields[label]:<28}"), BarColumn(bar_width=24), TimeElapsedColumn(),
                TextColumn("{task.description}"), console=self._console,
            )  # fmt: skip
            for name in STEPS:
                self._rows[name] = self._progress.add_task(
                    "waiting", total=1, label=LABELS[name], start=False
                )
            self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._progress is not None:
            self._progress.stop()
            self._progress = None

    def begin(self, name: str, note: str = "") -> None:
        if self._progress is not None:
            self._progress.start_task(self._rows[name])
            self._progress.update(self._rows[name], description=note or "running")
        self.say(f"[{name}] {LABELS[name]}" + (f": {note}" if note else ""))

    def end(self, name: str, note: str) -> None:
        if self._progress is not None:
            self._progress.update(self._rows[name], total=1, completed=1, description=note)
            self._progress.stop_task(self._rows[name])
        self.say(f"[{name}] {note}")

    def skip(self, name: str, note: str) -> None:
        if self._progress is not None:
            self._progress.update(self._rows[name], completed=1, description=note)
        self.say(f"[{name}] {note}")

    def say(self, text: str) -> None:
        if self._progress is not None:
            self._progress.console.print(text, highlight=False, markup=False)
        else:
            super().say(text)

    # RL's RunDisplay calls, onto the RL row
    def rl_deadline(self, deadline: float, steps: int) -> None:
        self._rl_deadline, self.total = deadline, steps

    def start_steps(self, done: int) -> None:
        if self._progress is not None:
            self._progress.update(self._rows["rl"], total=self.total, completed=done)

    def step(self, step: int, record: dict[str, Any]) -> None:
        line = step_line(step, self.total, record)
        if self._progress is not None:
            left = max(0.0, (self._rl_deadline or time.monotonic()) - time.monotonic())
            short = f"step {step}: reward {record['reward']['mean']:.2f}, {left / 60:.0f} min left"
            self._progress.update(self._rows["rl"], completed=step, description=short)
        self.say(line)

    def stop_steps(self) -> None:
        pass
