"""Convolutional capsule layers: routing restricted to local windows."""

import math

import keras
from keras import ops

from keras_capsules.initializers import householder_initializer, transform_initializer
from keras_capsules.layers.base_routed_capsule import split_capsule_inputs
from keras_capsules.layers.windowed_capsule import WindowedCapsule
from keras_capsules.ops import compute_dtype_for, householder_orthogonal
from keras_capsules.validation import positive_int


class ConvCapsule(WindowedCapsule):
    """Shared code of ConvCapsule1D and ConvCapsule2D (see ConvCapsule2D)."""

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        kernel_size=3,
        strides=1,
        padding="valid",
        router=None,
        orthogonal=False,
        return_activations=False,
        kernel_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(
            num_capsules,
            kernel_size,
            strides=strides,
            padding=padding,
            router=router,
            kernel_initializer=kernel_initializer,
            kernel_regularizer=kernel_regularizer,
            kernel_constraint=kernel_constraint,
            **kwargs,
        )
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.orthogonal = bool(orthogonal)
        self.return_activations = bool(return_activations)
        # With orthogonal=True the weight holds Householder vectors, whose
        # reflections are computed in float32.
        self._kernel_name = "householder" if self.orthogonal else "kernel"
        self._kernel_autocast = not self.orthogonal

    def _default_kernel_initializer(self, types, in_dim):
        if self.orthogonal:
            return householder_initializer
        children = math.prod(self.kernel_size) * types
        vote_stddev = self.router.vote_stddev(children, self.num_capsules, self.capsule_dim)
        return lambda: transform_initializer(vote_stddev)

    def _kernel_shape(self, types, in_dim):
        if self.orthogonal:
            n = max(in_dim, self.capsule_dim)
            return (*self.kernel_size, types, self.num_capsules, n, n)
        return (*self.kernel_size, types, self.num_capsules, in_dim, self.capsule_dim)

    def transforms(self):
        """The transforms `W`, `(*kernel_size, types, num_capsules, in_dim,
        capsule_dim)`; with `orthogonal=True` each is the top-left block of a
        product of Householder reflections (see `Capsule`)."""
        if self.orthogonal:
            w = householder_orthogonal(self.householder, self.in_dim, self.capsule_dim)
            return ops.cast(w, self.compute_dtype)
        return self.kernel

    def _out_dim(self, in_dim):
        return self.capsule_dim

    def _votes(self, windows):
        k, types = windows.shape[1:3]
        transforms = self.transforms()
        kernel = ops.reshape(transforms, (k, *transforms.shape[self.rank :]))
        # In the routing dtype, as `Capsule.votes`.
        dtype = compute_dtype_for(self.compute_dtype)
        votes = ops.einsum("nktd,ktjde->nktje", ops.cast(windows, dtype), ops.cast(kernel, dtype))
        return ops.reshape(votes, (-1, k * types, self.num_capsules, self.capsule_dim))

    def call(self, inputs, return_coefficients=False):
        poses, activations = split_capsule_inputs(inputs)
        poses, activations = self._to_grid(poses, activations)
        outputs = self._route_windows(poses, activations, return_coefficients)
        main = outputs[:2] if self.return_activations else outputs[0]
        return (main, outputs[2]) if return_coefficients else main

    def _to_grid(self, poses, activations):
        return poses, activations

    def compute_output_shape(self, input_shape):
        poses, activations = self._output_shapes(input_shape)
        return (poses, activations) if self.return_activations else poses

    def get_config(self):
        config = super().get_config()
        config.update(
            capsule_dim=self.capsule_dim,
            orthogonal=self.orthogonal,
            return_activations=self.return_activations,
        )
        return config


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


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvCapsule1D(ConvCapsule):
    """Windowed routing over a capsule sequence (1-D convolutional capsules).

    As `ConvCapsule2D` with one grid axis. The children of each window of
    `kernel_size` positions, moved by `strides`, vote with `W: (kernel_size,
    types, num_capsules, in_dim, capsule_dim)` and route among the window's
    parents:

    ```
    votes[b, p, (o, t), j, :] = u[b, p * s + o, t, :] @ W[o, t, j]
    poses[b, p], activations[b, p] = router(votes[b, p], a[b, p * s + o, t])
    ```

    Args:
        num_capsules, capsule_dim, router, orthogonal, return_activations,
        kernel_initializer, kernel_regularizer, kernel_constraint: as for
        `ConvCapsule2D`.
        kernel_size: int, the window length (positions per window).
        strides: int, the window step `s`.
        padding: `"valid"` or `"same"`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: child poses of shape `(batch, L, types, in_dim)`, or a plain
            capsule sequence `(batch, L, in_dim)` (one type); or `[poses,
            activations]` with activations of shape `(batch, L, types)` (or
            `(batch, L)`), passed to the router.

    Returns:
        Parent poses of shape `(batch, L', num_capsules, capsule_dim)` (`L'`
        as for a convolution); with `return_activations=True`, `(poses,
        activations)` with activations of shape `(batch, L', num_capsules)`.

    Example:

    >>> u = keras.Input((10, 8))        # 10 capsules of 8D in sequence
    >>> keras_capsules.layers.ConvCapsule1D(4, 6, 3, strides=2)(u).shape
    (None, 4, 4, 6)

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (locally-constrained routing), here on one axis.
    """

    rank = 1

    def _grid_shapes(self, input_shape):
        poses_shape, activations_shape = split_capsule_inputs(input_shape)
        if len(poses_shape) == 3:  # (batch, N, dim): one capsule type
            poses_shape = (*poses_shape[:2], 1, poses_shape[2])
            if activations_shape is not None:
                activations_shape = (*tuple(activations_shape), 1)
            input_shape = (
                poses_shape if activations_shape is None else [poses_shape, activations_shape]
            )
        return super()._grid_shapes(input_shape)

    def _to_grid(self, poses, activations):
        if len(poses.shape) == 3:
            poses = ops.expand_dims(poses, 2)
            if activations is not None:
                activations = ops.expand_dims(activations, 2)
        return poses, activations


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
