from versions import Version, bump, parse


def test_bump_minor_more():
    for start, expected in [(Version(0, 9, 7), Version(0, 10, 0)), (Version(2, 5, 1), Version(2, 6, 0))]:
        assert bump(start, "minor") == expected


def test_parse():
    for text, expected in [("2.5", Version(2, 5, 0)), ("1", Version(1, 0, 0))]:
        assert parse(text) == expected
