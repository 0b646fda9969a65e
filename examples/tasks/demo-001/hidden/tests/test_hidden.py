"""Laid over the workspace at grading only: the agent never sees this file."""

import pytest

from calc import add, sub


def test_add_negative():
    assert add(-2, -3) == -5


@pytest.mark.parametrize(("a", "b", "want"), [(3, 1, 2), (0, 4, -4)])
def test_sub_many(a, b, want):
    assert sub(a, b) == want
