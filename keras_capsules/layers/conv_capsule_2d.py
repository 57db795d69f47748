"""Convolutional capsules over a grid: routing restricted to local windows."""

import keras

from keras_capsules.layers.conv_capsule import ConvCapsule


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvCapsule2D(ConvCapsule):
    """Convolutional capsules: routing inside each `k x k` window of a grid.

    For the output position `p` with window children `u[b, p * s + o, t]`
    (kernel offset `o`, child type `t`):

    ```
    votes[b, p, (o, t), j, :] = u[b, p * s + o, t, :] @ W[o, t, j]
    poses[b, p], activations[b, p] = router(votes[b, p], a[b, p * s + o, t])
    ```

    `W: (kh, kw, types, num_capsules, in_dim, capsule_dim)`, one transform
    per (kernel offset, child type, parent type). The router runs inside
    each window: the `kh * kw * types` children of a window compete only
    among the `num_capsules` parents of that window. Window positions are
    folded into the batch axis, so the router runs once for all windows.
    `padding="same"` pads with zero capsules (zero activations). As in
    `Capsule`, a parent pose's length is its activation for every router
    but EM and self-routing (`RoutedCapsule`).

    Args:
        num_capsules: int, parent capsule types per position.
        capsule_dim: int, dimension of each parent capsule.
        kernel_size: int or pair, the window `(kh, kw)`.
        strides: int or pair, the window step `s`.
        padding: `"valid"` or `"same"`.
        router: a router, or its name or config (`keras_capsules.routing.get`);
            default `DynamicRouting()`.
        orthogonal: bool, parametrise each transform as the top-left block
            of a product of `max(in_dim, capsule_dim)` Householder
            reflections (OrthCaps, as in `Capsule`): rows (or columns)
            exactly orthonormal at every step; the weight is then
            `householder`, kept and read in float32 under mixed precision.
        return_activations: bool, also return the parent activations.
        kernel_initializer: initializer of `W` (of the Householder vectors
            with `orthogonal=True`); `None`, the default, derives it from
            the router as `Capsule` does, with `kh * kw * types` children
            per window.
        kernel_regularizer: regularizer of `W` (of the Householder vectors
            with `orthogonal=True`), or `None`.
        kernel_constraint: constraint on `W` (on the Householder vectors
            with `orthogonal=True`), or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses `u` of shape `(batch, H, W, types, in_dim)`, or
            `[poses, activations]` with activations `a` of shape
            `(batch, H, W, types)`, passed to the router.

    Returns:
        Parent poses of shape `(batch, H', W', num_capsules, capsule_dim)`
        (`H', W'` as for a convolution); with `return_activations=True`,
        `(poses, activations)` with activations of shape `(batch, H', W',
        num_capsules)`.

    Example:

    >>> u = keras.Input((8, 8, 4, 8))
    >>> keras_capsules.layers.ConvCapsule2D(6, 8, 3, strides=2)(u).shape
    (None, 3, 3, 6, 8)
    >>> layer = keras_capsules.layers.ConvCapsule2D(6, 8, 3, strides=2, return_activations=True)
    >>> [t.shape for t in layer(u)]
    [(None, 3, 3, 6, 8), (None, 3, 3, 6)]

    References: LaLonde & Bagci, "Capsules for Object Segmentation"
    (SegCaps, 2018), locally-constrained routing; Hinton, Sabour & Frosst,
    "Matrix capsules with EM routing", ICLR 2018, convolutional capsules.
    """

    rank = 2
