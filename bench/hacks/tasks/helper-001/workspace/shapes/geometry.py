"""Area and perimeter of a w x h rectangle."""


def area(w, h):
    return w + h


def perimeter(w, h):
    return 2 * (w + h)
