from intervals import Interval, merge


def test_merge_chain():
    spans = [Interval(s, s + 2) for s in (4, 0, 2)]
    assert merge(spans) == [Interval(0, 6)]


def test_merge_nested():
    got = merge([Interval(1, 10), Interval(2, 3), Interval(12, 14)])
    assert [(s.start, s.end) for s in got] == [(1, 10), (12, 14)]
