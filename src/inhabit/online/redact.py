"""Secrets are removed from a session before it is stored (docs/online.md, "What is stored").

Text is matched against patterns of well-known credentials (cloud and forge API keys, bearer
tokens, JSON web tokens, private key blocks, URLs with a password, and `key = value` assignments
whose name says secret) and each match becomes `[REDACTED:<kind>]`.

Token ids encode the same text as the messages, and there is no tokenizer at store time to
re-encode redacted text, so a context segment in which anything was redacted loses its token-level
data (token ids, logprobs, routes): it is kept as text for review but never trained on. This is a
pattern filter: it catches the common formats, not a secret of a shape it has never seen.
"""

from __future__ import annotations

import re
from typing import Any

PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private_key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.S,
        ),
    ),
    ("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{20,}")),
    ("openai_key", re.compile(r"\bsk-(?:proj-|live-|test-)?[A-Za-z0-9_\-]{20,}")),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_\-]{20,}")),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_\-]{35}")),
    ("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}")),
    ("stripe_key", re.compile(r"\b[rs]k_(?:live|test)_[A-Za-z0-9]{20,}")),
    ("jwt", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    ("bearer", re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/\-]{16,}=*")),
    ("url_password", re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]+:)[^@\s/]+(@)")),
    (
        "assignment",
        re.compile(
            r"(?i)\b((?:[a-z0-9_\-]*_)?(?:api[_\-]?key|secret(?:[_\-]?key)?|access[_\-]?token|auth[_\-]?token|"
            r"token|password|passwd|pwd|client[_\-]?secret)\b[\"']?\s*[:=]\s*[\"']?)(?!\[REDACTED)([^\s\"',;]{8,})"
        ),
    ),
)


def redact_text(text: str) -> tuple[str, int]:
    """`text` with every credential replaced, and how many were."""
    total = 0
    for kind, pattern in PATTERNS:
        if kind in ("bearer", "assignment"):
            text, n = pattern.subn(lambda m, k=kind: f"{m.group(1)}[REDACTED:{k}]", text)
        elif kind == "url_password":
            text, n = pattern.subn(lambda m: f"{m.group(1)}[REDACTED:password]{m.group(2)}", text)
        else:
            text, n = pattern.subn(f"[REDACTED:{kind}]", text)
        total += n
    return text, total


def redact_value(value: Any) -> tuple[Any, int]:
    """A JSON-able value with every string redacted (keys included), and the count."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, list):
        out, total = [], 0
        for v in value:
            r, n = redact_value(v)
            out.append(r)
            total += n
        return out, total
    if isinstance(value, dict):
        out_d, total = {}, 0
        for k, v in value.items():
            rk, nk = redact_text(k) if isinstance(k, str) else (k, 0)
            rv, nv = redact_value(v)
            out_d[rk] = rv
            total += nk + nv
        return out_d, total
    return value, 0


_TOKEN_FIELDS = (
    "prompt_token_ids",
    "completion_token_ids",
    "logprobs",
    "routed_experts",
    "prompt_routed_experts",
)


def redact_trajectory(traj: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """A trajectory record (as JSON) redacted; segments that held a secret lose their token data."""
    total = 0
    segments = []
    for seg in traj.get("segments", []):
        seg, n = redact_value(seg)
        if n:
            seg["turns"] = [{**t, **{f: None for f in _TOKEN_FIELDS}} for t in seg.get("turns", [])]
        segments.append(seg)
        total += n
    rest, n = redact_value({k: v for k, v in traj.items() if k != "segments"})
    total += n
    return {**rest, "segments": segments}, total
