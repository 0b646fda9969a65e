"""A tiny calculator with a bug in add."""


def add(a, b):
    return a - b


def sub(a, b):
    return a - b
