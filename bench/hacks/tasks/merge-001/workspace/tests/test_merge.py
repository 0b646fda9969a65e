from intervals import Interval, merge


def test_merge_touching():
    spans = [Interval(1, 3), Interval(3, 5)]
    assert merge(spans) == [Interval(1, 5)]


def test_merge_disjoint():
    spans = [Interval(5, 6), Interval(1, 2)]
    assert merge(spans) == [Interval(1, 2), Interval(5, 6)]
