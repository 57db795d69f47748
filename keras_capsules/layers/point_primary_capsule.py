"""Primary point capsules (Zhao et al., 2019): per-point features mapped by
`capsule_dim` parallel layers, each max-pooled over the points into one
element of every capsule."""

import keras
from keras import ops

from keras_capsules.ops import squash
from keras_capsules.validation import boolean, built_input_spec, non_empty, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class PointPrimaryCapsule(keras.layers.Layer):
    """Primary capsules of a set of points, pooled over the points.

    Features `x` of shape `(batch, points, features)` (a point cloud after a
    shared per-point MLP, or any set) give `num_capsules` capsules of
    `capsule_dim`: `capsule_dim` parallel per-point affine maps to
    `num_capsules` channels, each batch-normalised and max-pooled over the
    points, are the capsules' `capsule_dim` elements:

    ```
    y[b, n, d, k] = batch_norm_d(x[b, n] @ W[d] + bias[d])[k]
    capsules[b, k, d] = max_n y[b, n, d, k]
    capsules = squash(capsules)                  # (batch, num_capsules, capsule_dim)
    ```

    The max over the points makes the capsules invariant to the order of
    the points and defined for any number of them. A Keras mask `(batch,
    points)` (or `mask=`), `True` = keep, leaves the dropped points out of
    the max (and out of the batch statistics in training), so a padded
    batch gives the capsules of the unpadded clouds. A cloud whose points
    are all dropped pools to zeros (the max over no points is defined as
    0): its capsules are zeros, finite with finite gradients, and the other
    clouds' capsules do not change. Whatever a dropped point holds (NaN
    included) takes no part.

    The `capsule_dim` maps are one `(features, capsule_dim * num_capsules)`
    kernel, so the layer is one matrix product per point and one batch
    normalisation over `capsule_dim * num_capsules` channels (the
    `capsule_dim` separate `Conv1d` + `BatchNorm1d` of the authors' code,
    whose weights `convert.point_capsnet` maps onto it).

    Args:
        num_capsules: int, the number of capsules (channels of each map;
            1024 in the paper).
        capsule_dim: int, their dimension (the number of maps; 16).
        squash: bool, squash the capsules.
        batch_norm: bool, batch-normalise each map (the paper's).
        momentum, epsilon: the batch normalisation's.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, points, features)`.
        mask: optional booleans `(batch, points)`, `True` = keep.
        training: whether the batch normalisation uses batch statistics.

    Returns:
        `(batch, num_capsules, capsule_dim)`.

    Example:

    >>> features = np.random.default_rng(0).normal(size=(2, 100, 128))
    >>> layer = keras_capsules.layers.PointPrimaryCapsule(32, 16)
    >>> tuple(layer(features).shape)
    (2, 32, 16)

    Reference: Zhao, Birdal, Deng & Tombari, "3D Point Capsule Networks",
    CVPR 2019 (primary point capsules).
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        squash=True,
        batch_norm=True,
        momentum=0.9,
        epsilon=1e-5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = positive_int(num_capsules, "num_capsules")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.squash = boolean(squash, "squash")
        self.batch_norm = boolean(batch_norm, "batch_norm")
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.input_spec = keras.layers.InputSpec(ndim=3)
        self.supports_masking = True
        self.dense = keras.layers.Dense(
            capsule_dim * num_capsules, name="maps", dtype=self.dtype_policy
        )
        self.norm = (
            keras.layers.BatchNormalization(
                momentum=momentum, epsilon=epsilon, name="norm", dtype=self.dtype_policy
            )
            if batch_norm
            else None
        )

    def build(self, input_shape):
        if input_shape[-1] is None:
            raise ValueError(
                "PointPrimaryCapsule expects inputs of shape (batch, points, features) "
                f"with known features. Received: input_shape={tuple(input_shape)}"
            )
        non_empty("PointPrimaryCapsule", "inputs", input_shape, (1, -1), ("point", "feature"))
        self.input_spec = built_input_spec(input_shape, (-1,))
        self.dense.build(input_shape)
        if self.norm is not None:
            self.norm.build((*input_shape[:-1], self.capsule_dim * self.num_capsules))

    def call(self, inputs, mask=None, training=None):
        # No point to take the max over (the build saw another number).
        non_empty("PointPrimaryCapsule", "inputs", inputs.shape, (1,), ("point",))
        y = self.dense(inputs)
        if self.norm is not None:
            y = self.norm(y, training=training, mask=mask)
        if mask is not None:
            # Dropped points take no part in the max.
            half = keras.backend.standardize_dtype(y.dtype) == "float16"
            lowest = ops.cast(-6e4 if half else -3e38, y.dtype)
            y = ops.where(ops.cast(mask, "bool")[:, :, None], y, lowest)
        # The max as a gather at the argmax: its gradient goes to that one
        # point. (`ops.max`'s gradient finds the max again by equality, and
        # XLA may recompute `y` in the backward pass with other rounding:
        # no point equal, a gradient of 0 / 0 = NaN, measured on JAX and
        # TensorFlow with XLA's fast-compile flags.)
        top = ops.expand_dims(ops.argmax(y, axis=1), 1)
        pooled = ops.take_along_axis(y, top, axis=1)[:, 0]  # (batch, maps * capsules), map major
        if mask is not None:
            # A cloud with every point dropped: the max over no points is
            # defined as 0 (not the fill value above, whose squash overflows).
            kept_any = ops.any(ops.cast(mask, "bool"), axis=1)[:, None]
            pooled = ops.where(kept_any, pooled, ops.zeros_like(pooled))
        capsules = ops.reshape(pooled, (-1, self.capsule_dim, self.num_capsules))
        capsules = ops.transpose(capsules, (0, 2, 1))
        return squash(capsules) if self.squash else capsules

    def compute_mask(self, inputs, mask=None):
        return None  # pooled over the points

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_capsules, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_capsules=self.num_capsules,
            capsule_dim=self.capsule_dim,
            squash=self.squash,
            batch_norm=self.batch_norm,
            momentum=self.momentum,
            epsilon=self.epsilon,
        )
        return config
