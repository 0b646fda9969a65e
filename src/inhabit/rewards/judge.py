"""LLM judges: one rubric dimension of a code change, scored by a separate call to any
OpenAI-compatible endpoint (inhabit's own `inhabit serve`, vLLM, SGLang, a hosted API).

A judge renders a FIXED prompt (`PROMPT`, below, plus the rubric of its dimension), asks for a
justification ending in one line `SCORE: N/10`, and parses the LAST such line strictly (an integer
or decimal 0-10). An answer without one, or with a score out of range, is retried; a transport
error or timeout is retried with backoff. After `retries` more tries the judge gives NO score:
`JudgeResult.score is None` with `error` saying why. It never raises and never returns a silent 0.

Scores are cached on disk (sqlite, one file under `cache_dir`) keyed by the SHA-256 of everything
that determines the answer: the judge's model name, the full prompt, temperature and max_tokens.
Only parsed scores are cached, so a failure is retried by the next call. The cache does not key on
the endpoint URL: the same model behind another URL is the same judge.

Built-in dimensions (`RUBRICS`): "correctness" (of the change and the reasoning behind it),
"style" (readability and idiom), "minimality" (no change beyond what the task needs). A judge may
bring its own rubric text instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from pydantic import Field

from inhabit.config import Config
from inhabit.log import get_logger

__all__ = ["PROMPT", "RUBRICS", "Judge", "JudgeCache", "JudgeConfig", "JudgeResult", "parse_score"]

log = get_logger(__name__)

RUBRICS = {
    "correctness": (
        "Correctness: does the change fix the problem the task describes, for every input the task "
        "implies, and is the reasoning in the agent's final message sound? 10 = correct and well "
        "reasoned; 5 = partly correct or reasoning with gaps; 0 = wrong or unrelated."
    ),
    "style": (
        "Code style: is the changed code readable and idiomatic for its language and for the "
        "surrounding code (names, structure, no dead code or debugging leftovers)? 10 = exemplary; "
        "5 = acceptable with clear flaws; 0 = hard to read or careless."
    ),
    "minimality": (
        "Minimality: does the change touch only what the task needs (no unrelated edits, no "
        "reformatting, no special-casing of test inputs)? 10 = minimal; 5 = some unneeded edits; "
        "0 = sprawling or gaming the tests."
    ),
}

PROMPT = """You are a strict reviewer grading ONE quality of a code change made by an AI agent.

Rubric:
{rubric}

The task the agent was given:
<task>
{instruction}
</task>

The agent's change (unified diff):
<diff>
{diff}
</diff>

The agent's final message:
<message>
{message}
</message>

Judge only the quality named by the rubric. Write at most a few sentences of justification, then
end with one line of exactly this form, with N a number from 0 to 10:
SCORE: N/10"""

_SCORE_RE = re.compile(r"^\s*SCORE:\s*(\d+(?:\.\d+)?)\s*/\s*10\s*$", re.MULTILINE)
_MAX_FIELD_CHARS = 12_000


def parse_score(text: str) -> float | None:
    """The last `SCORE: N/10` line of `text` as N/10 in [0, 1]; None when there is none or N > 10."""
    found = _SCORE_RE.findall(text or "")
    if not found:
        return None
    value = float(found[-1])
    return value / 10 if 0 <= value <= 10 else None


class JudgeConfig(Config):
    """One judge: a rubric dimension, the endpoint that scores it, and its weight in the reward."""

    name: str = Field(min_length=1, description="Part name in the reward (e.g. 'style').")
    rubric: str | None = Field(None, description="Rubric text; None: the built-in rubric named `name`.")
    base_url: str = Field(description="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1.")
    model: str | None = Field(None, description="Model name at the endpoint; None: its first listed model.")
    api_key_env: str | None = Field(None, description="Environment variable holding the API key, if any.")
    weight: float = Field(0.1, ge=0, description="Weight of this part in the composed reward.")
    temperature: float = Field(0.0, ge=0, le=2)
    max_tokens: int = Field(256, ge=16, le=8192, description="Tokens the judge may write.")
    timeout_s: float = Field(60.0, gt=0, description="Limit of one call.")
    retries: int = Field(2, ge=0, le=10, description="Extra tries after a failed or unparseable answer.")
    backoff_s: float = Field(0.5, ge=0, description="First retry delay after a transport error (doubles).")


@dataclass
class JudgeResult:
    """A judge's verdict. `score` in [0, 1], or None with `error` when the judge gave none."""

    name: str
    score: float | None
    error: str | None = None
    cached: bool = False
    attempts: int = 0
    answer: str = ""
    """The judge's last answer (cut to 2000 characters), for humans."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class JudgeCache:
    """Content-keyed score cache: one sqlite file, safe across threads and processes."""

    def __init__(self, directory: str | Path) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.path = Path(directory) / "judge-cache.sqlite"
        self._lock = threading.Lock()
        with self._connect() as db:
            db.execute("CREATE TABLE IF NOT EXISTS scores (key TEXT PRIMARY KEY, score REAL, answer TEXT)")

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=30)

    def get(self, key: str) -> tuple[float, str] | None:
        with self._lock, self._connect() as db:
            row = db.execute("SELECT score, answer FROM scores WHERE key = ?", (key,)).fetchone()
        return (float(row[0]), str(row[1])) if row else None

    def put(self, key: str, score: float, answer: str) -> None:
        with self._lock, self._connect() as db:
            db.execute("INSERT OR REPLACE INTO scores VALUES (?, ?, ?)", (key, score, answer))


def _cut(text: str) -> str:
    if len(text) <= _MAX_FIELD_CHARS:
        return text
    half = _MAX_FIELD_CHARS // 2
    return f"{text[:half]}\n[... {len(text) - _MAX_FIELD_CHARS} characters cut ...]\n{text[-half:]}"


class Judge:
    """Scores changes on one rubric dimension (see the module docstring)."""

    def __init__(self, config: JudgeConfig, cache: JudgeCache | None = None) -> None:
        import openai

        self.config = config
        rubric = config.rubric or RUBRICS.get(config.name)
        if rubric is None:
            from inhabit.errors import ConfigError

            raise ConfigError(
                f"judge {config.name!r} has no rubric: give `rubric` or use one of {sorted(RUBRICS)}"
            )
        self.rubric = rubric
        self.cache = cache
        api_key = os.environ.get(config.api_key_env, "") if config.api_key_env else ""
        self._client = openai.AsyncOpenAI(
            base_url=config.base_url, api_key=api_key or "not-needed", timeout=config.timeout_s, max_retries=0
        )
        self._model = config.model

    def prompt(self, *, instruction: str, diff: str, message: str) -> str:
        return PROMPT.format(rubric=self.rubric, instruction=_cut(instruction), diff=_cut(diff) or "(no change)",
                             message=_cut(message) or "(none)")  # fmt: skip

    async def _model_name(self) -> str:
        if self._model is None:
            models = await asyncio.wait_for(self._client.models.list(), self.config.timeout_s)
            if not models.data:
                raise RuntimeError(f"{self.config.base_url} serves no models")
            self._model = models.data[0].id
        return self._model

    async def score(self, *, instruction: str, diff: str, message: str = "") -> JudgeResult:
        """Score one change. Never raises for endpoint trouble: the result says what went wrong."""
        cfg = self.config
        text = self.prompt(instruction=instruction, diff=diff, message=message)
        result = JudgeResult(name=cfg.name, score=None)
        try:
            model = await self._model_name()
        except Exception as e:
            result.error = f"no model at {cfg.base_url}: {type(e).__name__}: {e}"[:500]
            return result
        key = hashlib.sha256(
            json.dumps([model, text, cfg.temperature, cfg.max_tokens], ensure_ascii=False).encode()
        ).hexdigest()
        if self.cache is not None and (hit := self.cache.get(key)) is not None:
            result.score, result.answer, result.cached = hit[0], hit[1], True
            return result
        delay = cfg.backoff_s
        for attempt in range(cfg.retries + 1):
            result.attempts = attempt + 1
            t0 = time.monotonic()
            try:
                response = await asyncio.wait_for(
                    self._client.chat.completions.create(
                        model=model,
                        messages=[{"role": "user", "content": text}],
                        max_tokens=cfg.max_tokens,
                        temperature=cfg.temperature,
                    ),
                    cfg.timeout_s,
                )
                answer = (response.choices[0].message.content or "") if response.choices else ""
            except Exception as e:  # transport, HTTP status, timeout: all retried, then recorded
                result.error = f"{type(e).__name__}: {e}"[:500] or type(e).__name__
                log.info("judge %s: try %d failed after %.1fs: %s", cfg.name, attempt + 1,
                         time.monotonic() - t0, result.error)  # fmt: skip
                await asyncio.sleep(delay)
                delay *= 2
                continue
            result.answer = answer[-2000:]
            score = parse_score(answer)
            if score is not None:
                result.score, result.error = score, None
                if self.cache is not None:
                    self.cache.put(key, score, result.answer)
                return result
            result.error = "unparseable answer: no line 'SCORE: N/10' with 0 <= N <= 10"
        return result

    async def close(self) -> None:
        await self._client.close()
