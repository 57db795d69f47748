"""SegCaps's convolutional capsules: locally-constrained routing over child
types (the shared code is `LocalCapsuleBase`)."""

import math

import keras

from keras_capsules.conv import conv2d
from keras_capsules.layers.local_capsule_base import LocalCapsuleBase
from keras_capsules.validation import check_grid


@keras.saving.register_keras_serializable(package="keras_capsules")
class LocalCapsule2D(LocalCapsuleBase):
    """Convolutional capsules with locally-constrained routing (SegCaps).

    Child poses `u[b, y, x, t, :]` (child type `t` of `T`) vote for each
    parent type `j` at each output position `p` through one kernel `K`,
    shared over the grid and the child types; the router runs at every
    position over the `T` child types:

    ```
    votes[b, p, t, j, :] = conv2d(u[b, :, :, t, :], K)[p, j, :] + bias[j, :]
    poses[b, p], activations[b, p] = router(votes[b, p])     # T children
    ```

    `K: (kh, kw, in_dim, num_capsules * capsule_dim)`, `conv2d` with
    `strides` and `padding`. Unlike `ConvCapsule2D`, where every (kernel
    offset, child type) of a window is a child with its own transform, the
    kernel sums over the window: a child type gives one vote per parent at
    each position, so the layer's weights do not grow with the child types.
    That is the layer of the authors' code, and what gives SegCaps R3 its
    1.4 M parameters. The bias is added to the votes (the authors' code
    adds it to the routed sum instead), so that every router serves. The
    default router, `DynamicRouting()` (3 iterations), starts the logits
    at 0 at each position; a pose's length is its activation for every
    router but EM and self-routing (`RoutedCapsule`).

    Initialisation: the default `K` (`kernel_initializer=None`) is a
    truncated normal of standard deviation `vote_stddev / (0.5 * sqrt(kh *
    kw))`, `vote_stddev = router.vote_stddev(T, num_capsules,
    capsule_dim)`: child poses of length 0.5 give votes with the standard
    deviation the router asks for (`keras_capsules.initializers`).

    Args:
        num_capsules: int, parent capsule types per position.
        capsule_dim: int, dimension of each parent capsule.
        kernel_size: int or pair, default 5 (SegCaps).
        strides: int or pair, default 1.
        padding: `"same"` (default) or `"valid"`.
        router: a router, or its name or config (`keras_capsules.routing.get`);
            default `DynamicRouting()`.
        return_activations: bool, also return the parent activations.
        implementation: how the convolution is computed (`"auto"`, the
            default, `"conv"`, `"matmul"`, `"hybrid"`, `"space_to_depth"`:
            `keras_capsules.conv.resolve_implementation`); the same values,
            a speed option not saved in the config.
        use_bias: bool, add a bias `(num_capsules, capsule_dim)` to the votes.
        kernel_initializer: initializer of `K`; `None` derives it from the
            router (above).
        bias_initializer: initializer of the bias (default zeros).
        kernel_regularizer, kernel_constraint: of `K`, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses `(batch, H, W, types, in_dim)`.

    Returns:
        parent poses `(batch, H', W', num_capsules, capsule_dim)` (`H', W'`
        as for a convolution), and with `return_activations=True` the
        activations `(batch, H', W', num_capsules)` too.

    Example:

    >>> u = keras.Input((16, 16, 2, 8))
    >>> keras_capsules.layers.LocalCapsule2D(4, 16, 5, strides=2)(u).shape
    (None, 8, 8, 4, 16)

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (arXiv:1804.04241), locally-constrained dynamic routing.
    """

    def __init__(
        self, num_capsules, capsule_dim, kernel_size=5, strides=1, padding="same", **kwargs
    ):
        super().__init__(
            num_capsules, capsule_dim, kernel_size, strides=strides, padding=padding, **kwargs
        )

    def _out_grid(self, grid):
        return check_grid(
            self.__class__.__name__, grid, self.kernel_size, self.strides, self.padding
        )

    def _taps(self):
        return math.prod(self.kernel_size)

    def _kernel_shape(self, in_dim, out_channels):
        return (*self.kernel_size, in_dim, out_channels)

    def _convolve(self, x, kernel):
        return conv2d(x, kernel, self.strides, self.padding, self._resolved_implementation(x))
