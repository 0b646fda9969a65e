"""The run folder's resumable state: `<run>/state.json`, rewritten whole (write to a temporary file,
then rename) after every change, so a crash or Ctrl-C leaves either the old or the new state.

    {"format": 1, "keys": {"repo": ..., "model": ..., "config": ...},
     "steps": {"tasks": {"status": "done", "elapsed_s": 81.2, "result": {...}}, ...}}

A step is `done` (its result kept) or `started` (cut short: `--resume` runs it again, and the
steps that resume inside themselves, the build, the evaluations and RL, pick up their own files).
`keys` say which inputs the finished steps belong to: a step whose inputs changed is not reused.

A step's time is charged to the budget when it ends or is cut (Ctrl-C). A process killed outright
(SIGKILL, SIGTERM, out of memory) charges nothing itself: while a step runs, `<run>/state.alive` is
touched every 30 s (`heartbeat`), and the next invocation charges the killed one's time up to
that file's last touch before it starts the step again.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["STEPS", "RunState"]

STEPS = ("tasks", "baseline", "bootstrap", "rl", "final", "report")
"""The steps, in order."""

DEPENDS = {
    "tasks": ("repo", "tasks"),
    "baseline": ("repo", "tasks", "model", "eval"),
    "bootstrap": ("repo", "tasks", "model", "eval", "bootstrap"),
}
"""Which keys a reusable step's result depends on; RL, final and report always depend on all."""


class RunState:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {"format": 1, "keys": {}, "steps": {}}
        if path.is_file():
            self.data = json.loads(path.read_text())

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1))
        os.replace(tmp, self.path)

    def adopt(self, keys: dict[str, str], *, resume: bool) -> list[str]:
        """Keep the finished steps whose inputs (`keys`) are unchanged; without `resume`, RL and what
        follows start over (a second run reuses tasks, environment, baseline and bootstrap).
        Returns the names of the steps kept."""
        old = self.data.get("keys", {})
        kept = {}
        for name, rec in self.data.get("steps", {}).items():
            deps = DEPENDS.get(name, tuple(keys))
            same = all(old.get(k) == keys.get(k) for k in deps)
            if same and (resume or name in DEPENDS):
                kept[name] = rec
        self.data["keys"], self.data["steps"] = keys, kept
        if not resume:  # time an earlier invocation spent on what this one reuses is not this run's
            self.data["reused_s"] = sum(r.get("elapsed_s", 0.0) for r in kept.values())
        self.save()
        return [n for n in STEPS if kept.get(n, {}).get("status") == "done"]

    def step(self, name: str) -> dict[str, Any]:
        return self.data["steps"].get(name, {})

    def done(self, name: str) -> bool:
        return self.step(name).get("status") == "done"

    def result(self, name: str) -> dict[str, Any]:
        return self.step(name).get("result", {})

    @property
    def alive_path(self) -> Path:
        return self.path.with_name("state.alive")

    @contextlib.contextmanager
    def heartbeat(self, every_s: float = 30.0) -> Iterator[None]:
        """Touch `state.alive` every `every_s` seconds while the block runs (see the module
        docstring): the last touch bounds what a killed invocation spent."""
        stop = threading.Event()

        def beat() -> None:
            while True:
                self.alive_path.touch()
                if stop.wait(every_s):
                    return

        thread = threading.Thread(target=beat, name="specialize-heartbeat", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def start(self, name: str) -> None:
        rec = self.data["steps"].setdefault(name, {"elapsed_s": 0.0})
        if rec.get("started_at"):  # an invocation that was killed in this step charged nothing
            try:
                last = self.alive_path.stat().st_mtime
            except OSError:
                last = rec["started_at"]
            lost = max(0.0, min(last, time.time()) - rec.pop("started_at"))
            rec["elapsed_s"] = round(rec.get("elapsed_s", 0.0) + lost, 2)
        rec["status"], rec["started_at"] = "started", time.time()
        self.save()

    def charge(self, name: str) -> None:
        """Add the time since `start` to the step's elapsed total (called when it ends or is cut)."""
        rec = self.data["steps"].get(name)
        if rec and rec.get("started_at"):
            rec["elapsed_s"] = round(rec.get("elapsed_s", 0.0) + time.time() - rec.pop("started_at"), 2)
            self.save()

    def finish(self, name: str, result: dict[str, Any]) -> None:
        self.charge(name)
        rec = self.data["steps"][name]
        rec["status"], rec["result"] = "done", result
        self.save()

    def elapsed(self) -> float:
        """Seconds this run has spent so far (every invocation of it, less what it reused from an
        earlier run): what the budget is charged."""
        total = sum(r.get("elapsed_s", 0.0) for r in self.data["steps"].values())
        return max(0.0, total - self.data.get("reused_s", 0.0))
