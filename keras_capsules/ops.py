"""Backend-agnostic capsule ops, written with `keras.ops` only.

Norms and squashes are computed in float32 when the input is float16 or
bfloat16 (then cast back), and every norm is `sqrt(sum(x^2) + epsilon)`, so
values and gradients stay finite at `x = 0` and for large inputs.
"""

import keras
from keras import ops

_HALF_DTYPES = ("float16", "bfloat16")


def compute_dtype_for(dtype):
    """The dtype to do numerically sensitive work in: float32 for half inputs."""
    dtype = keras.backend.standardize_dtype(dtype)
    return "float32" if dtype in _HALF_DTYPES else dtype


def _upcast(x):
    x = ops.convert_to_tensor(x)
    original = keras.backend.standardize_dtype(x.dtype)
    return ops.cast(x, compute_dtype_for(original)), original


def safe_norm(x, axis=-1, keepdims=False, epsilon=1e-7):
    """Euclidean norm that is differentiable at zero.

    `safe_norm(x) = sqrt(sum(x^2, axis) + epsilon)`.

    Args:
        x: tensor.
        axis: axis (or axes) to reduce.
        keepdims: keep the reduced axis with size 1.
        epsilon: added under the square root; keeps the gradient finite
            at `x = 0`.

    Returns:
        The norm, in the dtype of `x`.
    """
    x, original = _upcast(x)
    norm = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=keepdims) + epsilon)
    return ops.cast(norm, original)


def squash(x, axis=-1, epsilon=1e-7):
    """The squash non-linearity of Sabour et al. (2017), eq. 1.

    `squash(x) = n2 / (1 + n2) * x / sqrt(n2 + epsilon)` with
    `n2 = sum(x^2, axis)`: short vectors shrink towards 0, long ones
    towards unit length, the direction is kept.

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017.

    Example:

    >>> keras_capsules.ops.squash(keras.ops.ones((2, 4)))  # lengths 0.8
    """
    x, original = _upcast(x)
    n2 = ops.sum(ops.square(x), axis=axis, keepdims=True)
    scale = n2 / (1.0 + n2) / ops.sqrt(n2 + epsilon)
    return ops.cast(x * scale, original)


def efficient_squash(x, axis=-1, epsilon=1e-7):
    """The squash of Efficient-CapsNet (Mazzia et al., 2021), eq. 5.

    `efficient_squash(x) = (1 - 1 / exp(n)) * x / n` with
    `n = safe_norm(x, axis, epsilon)`.

    Reference: Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 2021.
    """
    x, original = _upcast(x)
    n = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=True) + epsilon)
    # 1 - 1/exp(n) == 1 - exp(-n); the latter cannot overflow.
    return ops.cast((1.0 - ops.exp(-n)) * x / n, original)
