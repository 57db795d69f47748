"""Argument checks shared by layers and routers.

Each raises a `ValueError` that names the argument and the value received,
at construction or build time, before any computation. Any integral number
(`3`, `np.int64(3)`) is an int, any real number (`0.5`, `np.float32(0.5)`)
a float; `bool` is neither, as a flag passed by mistake is never a size.

Example:

>>> from keras_capsules.validation import positive_int
>>> positive_int(np.int64(3), "iterations")
3
>>> positive_int(0, "iterations")
Traceback (most recent call last):
    ...
ValueError: `iterations` must be a positive integer. Received: iterations=0
"""

import math
import numbers
import operator

import keras

from keras_capsules.windows import window_output_shape


def is_int(value):
    """True for integral numbers (NumPy's included), False for bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value):
    """True for real numbers (NumPy's included), False for bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def positive_int(value, name):
    """Returns `value` as a Python int if it is an integer >= 1, else raises."""
    if not is_int(value) or value < 1:
        raise ValueError(f"`{name}` must be a positive integer. Received: {name}={value!r}")
    # operator.index: np.int64(3) -> 3, so configs hold plain ints.
    return operator.index(value)


def int_tuple(value, n, name):
    """Expands an int to an `n`-tuple of positive ints, or checks a tuple."""
    error = ValueError(
        f"`{name}` must be a positive integer or a tuple of {n} of them. Received: {name}={value!r}"
    )
    if is_int(value):
        values = (value,) * n
    elif isinstance(value, (list, tuple)):
        values = tuple(value)
    else:  # None, floats, strings and arrays are not sizes.
        raise error
    if len(values) != n or not all(is_int(v) and v >= 1 for v in values):
        raise error
    return tuple(operator.index(v) for v in values)


def boolean(value, name):
    """Returns `value` if it is `True` or `False`, else raises."""
    if not isinstance(value, bool):
        raise ValueError(f"`{name}` must be True or False. Received: {name}={value!r}")
    return value


def built_input_spec(shape, axes):
    """A `keras.layers.InputSpec` for inputs like those of `shape`, the
    shape a layer was built for: their rank, and the sizes of `axes` where
    `shape` knows them. Set as the layer's `input_spec` in `build`, Keras's
    `__call__` then refuses, before any computation, a later input whose
    rank or sizes differ, naming the layer, the axis, the size expected
    and the shape received.

    Example:

    >>> from keras_capsules.validation import built_input_spec
    >>> built_input_spec((None, 5, 4), (-1,)).axes
    {-1: 4}
    """
    shape = tuple(shape)
    return keras.layers.InputSpec(
        ndim=len(shape), axes={a: shape[a] for a in axes if shape[a] is not None}
    )


def non_empty(layer_name, input_name, shape, axes, names):
    """Raises unless the sizes of `shape` on `axes` (named `names`), where
    known, are at least 1: a layer that reduces or reshapes over them has
    nothing to compute on an empty axis."""
    shape = tuple(shape)
    for axis, name in zip(axes, names):
        if shape[axis] == 0:
            raise ValueError(
                f"{layer_name} needs at least one {name}. Received: {input_name}.shape={shape}"
            )


def one_of(value, choices, name):
    """Returns `value` if it is in `choices`, else raises."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"`{name}` must be one of {tuple(choices)}. Received: {name}={value!r}")
    return value


def finite_float(value, name, low=None, high=None, low_inclusive=False, high_inclusive=True):
    """Returns `float(value)` if it is a finite real number in the given
    range (`low < value <= high` by default; a bound of `None` is open),
    else raises."""
    ok = is_real(value) and math.isfinite(value)
    if ok and low is not None:
        ok = value >= low if low_inclusive else value > low
    if ok and high is not None:
        ok = value <= high if high_inclusive else value < high
    if not ok:
        if low is not None and high is not None:
            condition = (
                f" in {'[' if low_inclusive else '('}{low}, {high}{']' if high_inclusive else ')'}"
            )
        elif low is not None:
            condition = f" {'>=' if low_inclusive else '>'} {low}"
        elif high is not None:
            condition = f" {'<=' if high_inclusive else '<'} {high}"
        else:
            condition = ""
        raise ValueError(f"`{name}` must be a finite number{condition}. Received: {name}={value!r}")
    return float(value)


def positive_float(value, name):
    """Returns `float(value)` if it is a finite number > 0, else raises."""
    return finite_float(value, name, low=0.0)


def non_negative_float(value, name):
    """Returns `float(value)` if it is a finite number >= 0, else raises."""
    return finite_float(value, name, low=0.0, low_inclusive=True)


def check_kernel_fits(layer_name, grid_name, spatial, kernel_size, strides, padding):
    """The output grid of a windowed layer (`None` where `spatial` is);
    raises if an axis of the grid is empty or the kernel does not fit the
    known sizes."""
    if any(n == 0 for n in spatial):
        raise ValueError(
            f"{layer_name} needs at least one position on each axis of its {grid_name} grid. "
            f"Received: grid={tuple(spatial)}"
        )
    out = window_output_shape(spatial, kernel_size, strides, padding)
    if any(n is not None and n < 1 for n in out):
        raise ValueError(
            f"{layer_name}: `kernel_size={tuple(kernel_size)}` is larger than the "
            f"{grid_name} grid {tuple(spatial)} with padding={padding!r}."
        )
    return out


def check_grid(layer_name, spatial, kernel_size, strides, padding):
    """As `check_kernel_fits` for a capsule grid, whose sizes must be known."""
    if any(n is None for n in spatial):
        raise ValueError(f"{layer_name} needs a known grid size. Received: grid={tuple(spatial)}")
    return check_kernel_fits(layer_name, "capsule", spatial, kernel_size, strides, padding)


def check_activations_shape(name, of, shape, activations_shape):
    """Raises unless activations are `(batch, in_caps)` for the `of` tensor
    (votes or poses) of shape `(batch, in_caps, ...)`; sizes that are `None`
    match anything.

    Args:
        name: the router's or layer's class name, for the message.
        of: `"votes"` or `"poses"`, for the message.
        shape: the shape of that tensor.
        activations_shape: the activations' shape, or `None` (no check).

    Example:

    >>> from keras_capsules.validation import check_activations_shape
    >>> check_activations_shape("EMRouting", "votes", (2, 6, 3, 16), (None, 6))  # passes
    """
    if activations_shape is None:
        return
    activations_shape, shape = tuple(activations_shape), tuple(shape)
    expected = shape[:2]
    if len(activations_shape) != 2 or not all(
        None in (a, e) or a == e for a, e in zip(activations_shape, expected)
    ):
        raise ValueError(
            f"{name} expects activations of shape (batch, in_caps) = {expected} "
            f"for {of}.shape={shape}. "
            f"Received: activations.shape={activations_shape}"
        )
