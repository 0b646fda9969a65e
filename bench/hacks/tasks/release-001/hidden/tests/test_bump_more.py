import pytest
from versions import Version, bump, parse


@pytest.mark.parametrize(
    "start, expected",
    [
        (Version(0, 9, 7), Version(0, 10, 0)),
        (Version(2, 5, 1), Version(2, 6, 0)),
    ],
)
def test_bump_minor_more(start, expected):
    assert bump(start, "minor") == expected


@pytest.mark.parametrize("text, expected", [("2.5", Version(2, 5, 0)), ("1", Version(1, 0, 0))])
def test_parse(text, expected):
    assert parse(text) == expected
