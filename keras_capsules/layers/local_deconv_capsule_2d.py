"""SegCaps's deconvolutional capsules: locally-constrained routing over child
types, a transposed convolution for the votes (the shared code is
`LocalCapsuleBase`)."""

import math

import keras

from keras_capsules.conv import conv2d_transpose
from keras_capsules.layers.local_capsule_base import LocalCapsuleBase


@keras.saving.register_keras_serializable(package="keras_capsules")
class LocalDeconvCapsule2D(LocalCapsuleBase):
    """Deconvolutional capsules with locally-constrained routing (SegCaps).

    As `LocalCapsule2D`, with a transposed convolution for the votes: the
    grid grows by `strides` (`"same"`: `H' = H * s`; `"valid"`: `H' = (H -
    1) * s + max(k, s)`), as in SegCaps's decoder path:

    ```
    votes[b, p, t, j, :] = conv_transpose(u[b, :, :, t, :], K)[p, j, :] + bias[j, :]
    poses[b, p], activations[b, p] = router(votes[b, p])     # T children
    ```

    `K: (kh, kw, num_capsules * capsule_dim, in_dim)`, the layout of
    `keras.ops.conv_transpose`. The default `K` is drawn as for
    `LocalCapsule2D`, with the `ceil(kh / s) * ceil(kw / s)` input
    positions that feed one output position.

    Args:
        num_capsules, capsule_dim, router, return_activations, use_bias,
        kernel_initializer, bias_initializer, kernel_regularizer,
        kernel_constraint: as for `LocalCapsule2D`.
        implementation: `"conv"`, the native transposed convolution, or
            its sub-pixel form (`keras_capsules.conv.conv2d_transpose`)
            computed by `"matmul"`, `"hybrid"` or `"space_to_depth"`;
            `"auto"` (the default) picks as for a strided convolution
            (`keras_capsules.conv.resolve_implementation`). The same values.
        kernel_size: int or pair, default 4 (SegCaps).
        strides: int or pair, the upsampling factor, default 2.
        padding: `"same"` (default) or `"valid"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses `(batch, H, W, types, in_dim)`.

    Returns:
        parent poses `(batch, H', W', num_capsules, capsule_dim)`, and
        with `return_activations=True` the activations too.

    Example:

    >>> u = keras.Input((8, 8, 4, 16))
    >>> keras_capsules.layers.LocalDeconvCapsule2D(2, 16, 4, strides=2)(u).shape
    (None, 16, 16, 2, 16)

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (arXiv:1804.04241), deconvolutional capsules.
    """

    def __init__(
        self, num_capsules, capsule_dim, kernel_size=4, strides=2, padding="same", **kwargs
    ):
        super().__init__(
            num_capsules, capsule_dim, kernel_size, strides=strides, padding=padding, **kwargs
        )

    def _out_grid(self, grid):
        if self.padding == "same":
            return tuple(n * s for n, s in zip(grid, self.strides))
        return tuple(
            (n - 1) * s + max(k, s) for n, k, s in zip(grid, self.kernel_size, self.strides)
        )

    def _taps(self):
        return math.prod(-(-k // s) for k, s in zip(self.kernel_size, self.strides))

    def _kernel_shape(self, in_dim, out_channels):
        return (*self.kernel_size, out_channels, in_dim)

    def _convolve(self, x, kernel):
        implementation = self._resolved_implementation(x)
        return conv2d_transpose(x, kernel, self.strides, self.padding, implementation)
