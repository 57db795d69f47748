"""`LocalReferenceFrames`: a rotation per point that turns with the cloud."""

import keras
from keras import ops

from keras_capsules import point_cloud, quaternion
from keras_capsules.validation import positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class LocalReferenceFrames(keras.layers.Layer):
    """Each point's local reference frame, as a unit quaternion.

    The frame of a point is made from its `num_neighbors` nearest points
    (`keras_capsules.point_cloud.local_reference_frames`: the principal
    axes of their offsets, signs set by where most of them lie) and turned
    into a quaternion (`keras_capsules.quaternion.from_rotation_matrix`,
    `w >= 0`). Rotating the cloud by `r` turns each frame `q` into `r q`
    (up to sign): these are the input poses of rotation-equivariant
    capsules (`QuaternionCapsule`). A cloud with a NaN or Inf coordinate
    in a kept point gets NaN frames, and the other clouds of the batch
    their own frames (no error for the batch). No weights, no gradient;
    computed in float32 under float16/bfloat16 policies, returned in the
    compute dtype.

    Args:
        num_neighbors: int, the neighbourhood size, `>= 3`.
        closed_form: find the eigenvectors in closed form
            (`keras_capsules.small_eigen`) instead of `keras.ops.eigh`: under
            XLA (JAX, TensorFlow with `jit_compile=True`) 4-6x faster per
            step, but XLA takes several times longer to compile it; without
            XLA no faster. The results agree to float32 accuracy.
        **kwargs: base layer arguments (`name`, `dtype`).

    Call arguments:
        points: `(batch, n, 3)`, `n >= num_neighbors`.
        mask: optional booleans `(batch, n)`, `True` = keep (a Keras mask
            too): frames from kept neighbours only (a dropped point's frame
            is made around its own coordinates, NaN if they are not
            finite; no kept point's frame uses it); passed on.

    Returns:
        unit quaternions `(batch, n, 4)`.

    Example:

    >>> points = np.random.default_rng(0).normal(size=(2, 32, 3)).astype("float32")
    >>> frames = keras_capsules.layers.LocalReferenceFrames(8)(points)
    >>> tuple(frames.shape), np.allclose(np.linalg.norm(frames, axis=-1), 1, atol=1e-5)
    ((2, 32, 4), True)

    Reference: Tombari, Salti & Di Stefano, "Unique Signatures of
    Histograms for Local Surface Description", ECCV 2010; Zhao, Birdal,
    Lenssen, Menegatti, Guibas & Tombari, "Quaternion Equivariant Capsule
    Networks for 3D Point Clouds", ECCV 2020.
    """

    def __init__(self, num_neighbors=16, closed_form=False, **kwargs):
        super().__init__(**kwargs)
        self.closed_form = bool(closed_form)
        self.num_neighbors = positive_int(num_neighbors, "num_neighbors")
        if self.num_neighbors < 3:
            raise ValueError(
                "`num_neighbors` must be >= 3 (a frame needs a plane of neighbours). "
                f"Received: num_neighbors={num_neighbors}"
            )
        self.supports_masking = True

    def _check(self, points_shape):
        points_shape = tuple(points_shape)
        if len(points_shape) != 3 or points_shape[-1] != 3:
            raise ValueError(
                "LocalReferenceFrames expects points of shape (batch, n, 3). "
                f"Received: points.shape={points_shape}"
            )
        if isinstance(points_shape[1], int) and points_shape[1] < self.num_neighbors:
            raise ValueError(
                f"LocalReferenceFrames needs at least num_neighbors={self.num_neighbors} "
                f"points. Received: points.shape={points_shape}"
            )

    def build(self, points_shape):
        self._check(points_shape)
        self.built = True

    def call(self, points, mask=None):
        self._check(points.shape)
        frames = point_cloud.local_reference_frames(
            points, self.num_neighbors, mask, closed_form=self.closed_form
        )
        return ops.cast(quaternion.from_rotation_matrix(frames), self.compute_dtype)

    def compute_output_shape(self, points_shape):
        self._check(points_shape)
        return tuple(points_shape)[:2] + (4,)

    def get_config(self):
        config = super().get_config()
        config.update(num_neighbors=self.num_neighbors, closed_form=self.closed_form)
        return config
