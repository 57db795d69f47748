"""Convolutional capsules over a volume: routing restricted to local windows."""

import keras

from keras_capsules.layers.conv_capsule import ConvCapsule


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvCapsule3D(ConvCapsule):
    """Windowed routing over a volume of capsules (3-D convolutional capsules).

    As `ConvCapsule2D` with three grid axes. The children of each window of
    `kd x kh x kw` positions, moved by `strides`, vote with `W: (kd, kh,
    kw, types, num_capsules, in_dim, capsule_dim)` and route among the
    window's parents; window positions are folded into the batch axis, so
    the router runs once for all windows:

    ```
    votes[b, p, (o, t), j, :] = u[b, p * s + o, t, :] @ W[o, t, j]
    poses[b, p], activations[b, p] = router(votes[b, p], a[b, p * s + o, t])
    ```

    The votes of a step hold `batch * D' * H' * W' * kd * kh * kw * types *
    num_capsules * capsule_dim` numbers, 27 times a grid's parents for a
    3x3x3 window: `benchmarks/` measures what fits in memory.

    Args:
        num_capsules, capsule_dim, router, orthogonal, return_activations,
        kernel_initializer, kernel_regularizer, kernel_constraint: as for
        `ConvCapsule2D`.
        kernel_size: int or triple, the window `(kd, kh, kw)`.
        strides: int or triple, the window step `s`.
        padding: `"valid"` or `"same"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses `u` of shape `(batch, D, H, W, types, in_dim)`
            (e.g. `PrimaryCapsule3D(..., grid=True)`), or `[poses,
            activations]` with activations of shape `(batch, D, H, W,
            types)`, passed to the router.

    Returns:
        Parent poses of shape `(batch, D', H', W', num_capsules,
        capsule_dim)` (`D', H', W'` as for a convolution); with
        `return_activations=True`, `(poses, activations)` with activations
        of shape `(batch, D', H', W', num_capsules)`.

    Example:

    >>> u = keras.Input((6, 6, 6, 4, 8))
    >>> keras_capsules.layers.ConvCapsule3D(5, 8, 3, strides=2)(u).shape
    (None, 2, 2, 2, 5, 8)

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (locally-constrained routing), here on three axes as in 3-D capsule
    networks for volumes (e.g. Afshar et al., "3D-MCN", 2020).
    """

    rank = 3
