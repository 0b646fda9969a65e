"""Closed intervals and the merge of overlapping ones."""

from intervals.core import Interval, merge

__all__ = ["Interval", "merge"]
