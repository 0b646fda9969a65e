"""Semantic versions: parse, compare and bump."""

from versions.core import Version, bump, parse

__all__ = ["Version", "bump", "parse"]
