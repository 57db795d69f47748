"""3D point capsule networks (Zhao et al., 2019): a point-cloud autoencoder
whose latent code is a set of capsules."""

import keras
from keras import ops

from keras_capsules import routing
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.patch_decoder import _EPSILON, _MOMENTUM, PatchDecoder, _batch_norm
from keras_capsules.layers.point_primary_capsule import PointPrimaryCapsule
from keras_capsules.losses import ChamferDistance
from keras_capsules.models.capsule_task import CapsuleTask
from keras_capsules.validation import positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class PointCapsNet(CapsuleTask):
    """3D point capsule network: a point-cloud autoencoder (Zhao et al., 2019).

    ```
    points (batch, n, 3)
      -> per point: dense(64) -> BN -> ReLU -> dense(128) -> BN -> ReLU
      -> PointPrimaryCapsule(primary_capsules, primary_dim)   max over the points
      -> Capsule(latent_capsules, latent_dim, router)          latent capsules
      -> PatchDecoder(num_points // latent_capsules)           (batch, num_points, 3)
    loss: ChamferDistance (compile's default)
    ```

    The architecture of the authors' code: batch normalisation as
    PyTorch's defaults, the primary capsules' `primary_dim` parallel maps
    without a ReLU before the max, dynamic routing in 3 iterations whose
    votes' gradient is stopped but in the last (`DynamicRouting(3,
    stop_gradient=True)`, the default `router`), the decoder's grid drawn
    at every call. At the defaults it has the authors' 69,502,784
    trainable parameters (67,108,864 of them the latent capsules'
    transforms) and 40,512 non-trainable ones (the batch normalisations'
    running statistics). `convert.point_capsnet.load_authors_weights`
    reads their state dict.

    `encode(points, mask=None)` gives the latent capsules of clouds of any
    number of points (the primary capsules are a max over them); a mask
    `(batch, n)`, `True` = keep, leaves padded points out (a cloud with
    every point dropped: finite latent capsules, those of zero primary
    capsules). `model(points)`
    reconstructs `num_points` points; `model(points, return_poses=True)`
    gives `(reconstruction, latent capsules)`. Train as an autoencoder:
    `model.compile()` (Adam at 1e-3, `losses.ChamferDistance()`) then
    `model.fit(points, points)`. The task contract of every ready model
    (`CapsuleTask`): a saved model comes back compiled and resumes
    training on any backend.

    Args:
        num_points: int, points of the reconstruction; a multiple of
            `latent_capsules`.
        primary_capsules, primary_dim: the primary capsules (1024 of 16).
        latent_capsules, latent_dim: the latent capsules (64 of 64).
        router: the latent capsules' router, its name or config
            (`keras_capsules.routing.get`); default
            `DynamicRouting(iterations=3, stop_gradient=True)`.
        seed: int or `None`, the seed of the decoder's grid.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        points: `(batch, n, 3)`.
        mask: optional booleans `(batch, n)`, `True` = keep.
        training: whether the batch normalisations use batch statistics.
        return_poses: also return the latent capsules.

    Returns:
        the reconstruction `(batch, num_points, 3)`: point `m *
        latent_capsules + l` is patch `m` of latent capsule `l`; with
        `return_poses=True`, `(reconstruction, latent capsules)`.

    Example:

    >>> model = keras_capsules.models.PointCapsNet(
    ...     num_points=64, primary_capsules=32, primary_dim=4, latent_capsules=8, latent_dim=8)
    >>> points = np.random.default_rng(0).uniform(-1, 1, (2, 100, 3))
    >>> tuple(model.encode(points).shape), tuple(model(points).shape)
    ((2, 8, 8), (2, 64, 3))

    Reference: Zhao, Birdal, Deng & Tombari, "3D Point Capsule Networks",
    CVPR 2019.
    """

    inputs_name = "point clouds"
    takes_mask = True

    def __init__(
        self,
        num_points=2048,
        primary_capsules=1024,
        primary_dim=16,
        latent_capsules=64,
        latent_dim=64,
        router=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(input_shape=(None, 3), **kwargs)
        self.num_points = positive_int(num_points, "num_points")
        self.primary_capsules = positive_int(primary_capsules, "primary_capsules")
        self.primary_dim = positive_int(primary_dim, "primary_dim")
        self.latent_capsules = positive_int(latent_capsules, "latent_capsules")
        self.latent_dim = positive_int(latent_dim, "latent_dim")
        if num_points % latent_capsules:
            raise ValueError(
                "`num_points` must be a multiple of `latent_capsules` (each latent capsule "
                f"decodes num_points / latent_capsules points). Received: num_points="
                f"{num_points}, latent_capsules={latent_capsules}"
            )
        self.seed = seed
        dtype = self.dtype_policy
        self.stem = [
            keras.layers.Dense(64, name="stem_dense_0", dtype=dtype),
            _batch_norm("stem_norm_0", dtype),
            keras.layers.Dense(128, name="stem_dense_1", dtype=dtype),
            _batch_norm("stem_norm_1", dtype),
        ]
        self.primary = PointPrimaryCapsule(
            primary_capsules,
            primary_dim,
            momentum=_MOMENTUM,
            epsilon=_EPSILON,
            name="primary_capsules",
            dtype=dtype,
        )
        self.latent = Capsule(
            latent_capsules,
            latent_dim,
            router=router
            if router is not None
            else routing.DynamicRouting(iterations=3, stop_gradient=True),
            name="latent_capsules",
            dtype=dtype,
        )
        self.decoder = PatchDecoder(
            num_patches=num_points // latent_capsules, seed=seed, name="decoder", dtype=dtype
        )
        # Built from shapes here, as every ready model: clouds of any size.
        self.build((None, None, 3))

    def build(self, points_shape):
        self._check_points(points_shape)
        if self.decoder.built:
            return  # Built in `__init__`, for clouds of any size.
        shape = tuple(points_shape)
        for layer in self.stem:
            layer.build(shape)
            shape = layer.compute_output_shape(shape)
        self.primary.build(shape)
        self.latent.build((shape[0], self.primary_capsules, self.primary_dim))
        self.decoder.build((shape[0], self.latent_capsules, self.latent_dim))

    def _check_points(self, points_shape, name="points_shape"):
        points_shape = tuple(points_shape)
        if len(points_shape) != 3 or points_shape[-1] != 3 or points_shape[1] == 0:
            raise ValueError(
                "PointCapsNet expects point clouds of shape (batch, n, 3) with n >= 1. "
                f"Received: {name}={points_shape}"
            )

    def encode(self, points, mask=None, training=None):
        """The latent capsules `(batch, latent_capsules, latent_dim)` of
        clouds `(batch, n, 3)` of any `n`; `mask` `(batch, n)` drops
        points (`True` = keep), whatever they hold (NaN too). A cloud with
        every point dropped gets the latent capsules of an empty cloud:
        its primary capsules, a max over no points, are defined as zeros,
        so its latent capsules are finite (with finite gradients) and the
        other clouds' do not change."""
        x = ops.convert_to_tensor(points, dtype=self.compute_dtype)
        self._check_points(x.shape, "points.shape")
        if mask is not None:
            # Whatever a dropped point holds (NaN too) takes no part, also
            # in the batch statistics of training.
            x = ops.where(ops.cast(mask, "bool")[:, :, None], x, ops.zeros_like(x))
        for dense, norm in zip(self.stem[::2], self.stem[1::2]):
            x = ops.relu(norm(dense(x), training=training, mask=mask))
        return self.latent(self.primary(x, mask=mask, training=training))

    def decode(self, latent, grid=None, training=None):
        """The points `(batch, num_points, 3)` of latent capsules; `grid`
        `(batch, num_points // latent_capsules, latent_capsules, 2)` fixes
        the decoder's 2-D points (drawn uniformly in [0, 1) by default)."""
        return self.decoder(latent, grid=grid, training=training)

    def scores_and_poses(self, points, training=None, mask=None):
        self.check_inputs(points, "inputs")  # before any computation
        latent = self.encode(points, mask=mask, training=training)
        return self.decode(latent, training=training), latent

    def compute_output_shape(self, points_shape):
        return (points_shape[0], self.num_points, 3)

    def default_loss(self):
        """`losses.ChamferDistance()` between the clouds and their reconstructions."""
        return ChamferDistance()

    def get_config(self):
        config = super().get_config()
        config.update(
            num_points=self.num_points,
            primary_capsules=self.primary_capsules,
            primary_dim=self.primary_dim,
            latent_capsules=self.latent_capsules,
            latent_dim=self.latent_dim,
            router=routing.serialize(self.latent.router),
            seed=self.seed,
        )
        return config
