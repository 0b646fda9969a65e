"""Filler functions for the multistep family's long variants: realistic, tested by nothing, varied
by seed, so that a helper module runs to hundreds of lines and reading it costs real context.

Each shape is a small record-processing helper (count, group, index, rank, chunk...) of about a
dozen lines; `padding(rng, n, taken)` returns `n` of them with distinct names that avoid `taken`.
"""

from __future__ import annotations

import random
from string import Template

NOUNS = ("order", "record", "entry", "item", "row", "event", "note", "label", "visit", "batch", "ticket",
         "sample", "account", "shipment", "reading")  # fmt: skip
FIELDS = ("value", "amount", "size", "weight", "score", "count", "level", "cost")
KEYS = ("kind", "owner", "region", "status", "group", "source")

SHAPES = (
    '''def count_${noun}s_over(rows, threshold=$n):
    """Number of ${noun}s whose `$field` exceeds `threshold`."""
    count = 0
    for row in rows:
        if row.get("$field", 0) > threshold:
            count += 1
    return count
''',
    '''def group_${noun}s_by_$key(rows):
    """Dict of each `$key` to the ${noun}s that have it, in input order."""
    groups = dict()
    for row in rows:
        groups.setdefault(row.get("$key"), []).append(row)
    return groups
''',
    '''def index_${noun}s(rows, key="$key"):
    """Dict of `key` to the last $noun holding it; ${noun}s without the key are skipped."""
    index = dict()
    for row in rows:
        if key in row:
            index[row[key]] = row
    return index
''',
    '''def top_${noun}s(rows, n=$n):
    """The `n` ${noun}s of largest `$field`, largest first (ties keep input order)."""
    ranked = sorted(rows, key=lambda row: -row.get("$field", 0))
    return ranked[:n]
''',
    '''def chunk_${noun}s(rows, size=$n):
    """Consecutive lists of at most `size` ${noun}s."""
    if size < 1:
        raise ValueError("size must be at least 1")
    return [rows[i : i + size] for i in range(0, len(rows), size)]
''',
    '''def unique_${noun}_${key}s(rows):
    """Distinct `$key` values of the ${noun}s, first occurrence first."""
    seen = []
    for row in rows:
        value = row.get("$key")
        if value is not None and value not in seen:
            seen.append(value)
    return seen
''',
    '''def running_${field}_of_${noun}s(rows):
    """Cumulative sums of `$field` over the ${noun}s."""
    totals = []
    acc = 0
    for row in rows:
        acc += row.get("$field", 0)
        totals.append(acc)
    return totals
''',
    '''def ${noun}_table(rows, width=$w):
    """Text lines 'KEY  $field' for the ${noun}s, keys padded to `width`."""
    lines = []
    for row in rows:
        name = str(row.get("$key", "?"))
        lines.append(name.ljust(width) + "  " + str(row.get("$field", "")))
    return lines
''',
    '''def merge_${noun}_defaults(row, defaults=None):
    """A copy of `row` with every missing field taken from `defaults`."""
    merged = dict(defaults or dict($field=0, $key="unknown"))
    merged.update(row)
    return merged
''',
    '''def validate_${noun}(row, required=("$key", "$field")):
    """The names of required fields that `row` lacks or leaves empty, in order."""
    missing = []
    for name in required:
        if row.get(name) in (None, ""):
            missing.append(name)
    return missing
''',
)


def padding(rng: random.Random, n: int, taken: set[str]) -> list[str]:
    """`n` filler functions whose names are not in `taken` (which grows with them)."""
    out: list[str] = []
    while len(out) < n:
        text = Template(rng.choice(SHAPES)).substitute(
            noun=rng.choice(NOUNS), field=rng.choice(FIELDS), key=rng.choice(KEYS),
            n=rng.randint(2, 12), w=rng.choice((8, 10, 12, 16)),
        )  # fmt: skip
        name = text.split("(", 1)[0].removeprefix("def ")
        if name in taken:
            continue
        taken.add(name)
        out.append(text)
    return out
