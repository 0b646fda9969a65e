"""Copies of functions: a new function object over the same code, with the original's defaults."""

import types


def copy_function(orig):
    ret = types.FunctionType(
        orig.__code__, orig.__globals__, orig.__name__, orig.__defaults__, orig.__closure__
    )
    ret.__kwdefaults__ = orig.__kwdefaults__
    return ret
