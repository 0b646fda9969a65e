import pytest
from versions import Version, bump


@pytest.mark.parametrize(
    "start, part, expected",
    [
        (Version(1, 2, 3), "major", Version(2, 0, 0)),
        (Version(1, 2, 3), "minor", Version(1, 3, 0)),
        (Version(1, 2, 3), "patch", Version(1, 2, 4)),
    ],
)
def test_bump(start, part, expected):
    assert bump(start, part) == expected
