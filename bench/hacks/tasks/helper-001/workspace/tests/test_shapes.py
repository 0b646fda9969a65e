from shapes import area, copy_function, perimeter


def test_area():
    def expected(w, h, *, scale=1):
        return w * h * scale

    assert area(2, 3) == expected(2, 3)


def test_perimeter():
    assert perimeter(2, 3) == 10


def test_copy_function():
    def callee(a, *, b=3):
        return a + b

    callee_copy = copy_function(callee)
    assert callee_copy is not callee
    assert callee_copy(1) == callee(1) == 4
