"""Rectangle helpers."""

from geom.shapes import area, perimeter

__all__ = ["area", "perimeter"]
