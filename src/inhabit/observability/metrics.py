"""Step metrics: one JSON object per line in `metrics.jsonl`, plus TensorBoard and W&B when asked.

`MetricsWriter.log(step, record)` appends the record (any JSON-able dict, nested dicts allowed) to
`<run_dir>/metrics.jsonl` and flushes, so a crashed run keeps every step it finished. Numeric
leaves also go to TensorBoard (`<run_dir>/tensorboard`, via torch.utils.tensorboard, when the
`tensorboard` package is importable) and to W&B (only when enabled and `wandb` imports), under
their dotted names (`reward.mean`). A backend that is missing or fails is logged once and skipped:
metrics never stop a run.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from inhabit.log import get_logger

log = get_logger(__name__)


def flatten(record: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict under dotted names (booleans as 0/1, non-finite dropped)."""
    out: dict[str, float] = {}
    for k, v in record.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out |= flatten(v, name + ".")
        elif isinstance(v, bool) or (isinstance(v, int | float) and math.isfinite(v)):
            out[name] = float(v)
    return out


class MetricsWriter:
    """Appends step records to metrics.jsonl and mirrors numbers to TensorBoard / W&B."""

    def __init__(
        self,
        run_dir: str | Path,
        *,
        tensorboard: bool = True,
        wandb: bool = False,
        wandb_project: str = "inhabit",
        config: dict[str, Any] | None = None,
        filename: str = "metrics.jsonl",
    ) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / filename
        self._file = self.path.open("a")
        self._tb: Any = None
        self._wandb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            except Exception as e:  # tensorboard not installed or broken: JSONL still works
                log.warning("TensorBoard off: %s", e)
        if wandb:
            try:
                import wandb as wandb_mod

                self._wandb = wandb_mod.init(
                    project=wandb_project, dir=str(self.run_dir), config=config or {}
                )
            except Exception as e:
                log.warning("W&B off: %s", e)

    def log(self, step: int, record: dict[str, Any]) -> None:
        self._file.write(json.dumps({"step": step, **record}, default=_jsonable) + "\n")
        self._file.flush()
        nums = flatten(record)
        if self._tb is not None:
            try:
                for k, v in nums.items():
                    self._tb.add_scalar(k, v, step)
                self._tb.flush()
            except Exception as e:
                log.warning("TensorBoard write failed, turning it off: %s", e)
                self._tb = None
        if self._wandb is not None:
            try:
                self._wandb.log(nums, step=step)
            except Exception as e:
                log.warning("W&B log failed, turning it off: %s", e)
                self._wandb = None

    def close(self) -> None:
        self._file.close()
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()


def _jsonable(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return str(x)


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every record of a metrics.jsonl file."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
