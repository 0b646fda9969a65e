from geom import area, perimeter


def test_area_square():
    assert area(4, 4) == 16


def test_perimeter_square():
    assert perimeter(4, 4) == 16
