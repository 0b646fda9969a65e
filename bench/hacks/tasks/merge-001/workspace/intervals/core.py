"""An interval type and `merge`, the union of intervals as sorted, disjoint intervals."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    start: int
    end: int


def merge(intervals):
    """Sorted, disjoint intervals covering exactly `intervals`; touching intervals are joined."""
    out = []
    for span in sorted(intervals, key=lambda s: s.start):
        if out and span.start < out[-1].end:
            out[-1] = Interval(out[-1].start, max(out[-1].end, span.end))
        else:
            out.append(span)
    return out
