"""Argument checks shared by layers and routers.

Each raises a `ValueError` that names the argument and the value received,
at construction or build time, before any computation.
"""


def positive_int(value, name):
    """Returns `value` if it is an int >= 1, else raises."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(
            f"`{name}` must be a positive integer. Received: {name}={value!r}"
        )
    return value


def int_tuple(value, n, name):
    """Expands an int to an `n`-tuple of positive ints, or checks a tuple."""
    values = (value,) * n if isinstance(value, int) else tuple(value)
    if len(values) != n or not all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in values
    ):
        raise ValueError(
            f"`{name}` must be a positive integer or a tuple of {n} of them. "
            f"Received: {name}={value!r}"
        )
    return values


def one_of(value, choices, name):
    """Returns `value` if it is in `choices`, else raises."""
    if value not in choices:
        raise ValueError(
            f"`{name}` must be one of {tuple(choices)}. Received: {name}={value!r}"
        )
    return value


def positive_float(value, name):
    """Returns `float(value)` if it is a number > 0, else raises."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"`{name}` must be a number > 0. Received: {name}={value!r}")
    return float(value)
