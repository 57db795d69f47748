"""3D point capsule networks (Zhao et al., 2019): a point-cloud autoencoder
whose latent code is a set of capsules."""

import keras
from keras import ops

from keras_capsules import routing
from keras_capsules.layers.capsule import Capsule
from keras_capsules.layers.point_primary_capsule import PointPrimaryCapsule
from keras_capsules.losses import ChamferDistance
from keras_capsules.models.capsule_task import CapsuleTask
from keras_capsules.validation import positive_int

# The authors' batch normalisation: PyTorch's defaults (momentum 0.1 there
# is 0.9 here: the weight of the running value).
_MOMENTUM, _EPSILON = 0.9, 1e-5


def _batch_norm(name, dtype):
    return keras.layers.BatchNormalization(
        momentum=_MOMENTUM, epsilon=_EPSILON, name=name, dtype=dtype
    )


@keras.saving.register_keras_serializable(package="keras_capsules")
class PatchDecoder(keras.layers.Layer):
    """AtlasNet-style decoder of latent capsules: `patches` MLPs, each fed a
    capsule and a 2-D point, give each capsule `patches` 3-D points.

    For latent capsules `z (batch, capsules, dim)` and a grid `g (batch,
    patches, capsules, 2)` of 2-D points in [0, 1):

    ```
    x[b, m, l] = concat(g[b, m, l], z[b, l])                  (2 + dim)
    x -> dense_m(D) -> BN -> ReLU -> dense_m(D // 2) -> BN -> ReLU
      -> dense_m(D // 4) -> BN -> ReLU -> dense_m(3) -> tanh     D = dim + 2
    points[b, m * capsules + l] = x[b, m, l]
    ```

    Each of the `patches` MLPs has its own weights (`dense_m`) and batch
    normalisation; all run as one batched matrix product per layer (the
    weights stacked `(patches, in, out)`). The grid is drawn uniformly at
    every call, as the authors' (`grid=` gives one instead).

    Args:
        patches: int, the number of MLPs (points per capsule).
        seed: int or `None`, the seed of the grid's draws.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        latent: `(batch, capsules, dim)`.
        grid: optional `(batch, patches, capsules, 2)`.
        training: whether the batch normalisations use batch statistics.

    Returns:
        `(batch, patches * capsules, 3)` points in (-1, 1).

    Example:

    >>> decoder = keras_capsules.models.PatchDecoder(4)
    >>> tuple(decoder(np.zeros((2, 8, 16))).shape)
    (2, 32, 3)

    Reference: Groueix et al., "AtlasNet: A Papier-Mache Approach to
    Learning 3D Surface Generation", CVPR 2018; Zhao, Birdal, Deng &
    Tombari, "3D Point Capsule Networks", CVPR 2019.
    """

    def __init__(self, patches, seed=None, **kwargs):
        super().__init__(**kwargs)
        self.patches = positive_int(patches, "patches")
        self.seed = seed
        self.seed_generator = keras.random.SeedGenerator(seed)
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, latent_shape):
        dim = latent_shape[-1]
        if dim is None:
            raise ValueError(
                "PatchDecoder expects latent capsules (batch, capsules, dim) with a known "
                f"dim. Received: latent_shape={tuple(latent_shape)}"
            )
        width = dim + 2
        self.widths = (width, width, width // 2, width // 4, 3)
        self.kernels, self.biases, self.norms = [], [], []
        for k, (inputs, outputs) in enumerate(zip(self.widths[:-1], self.widths[1:])):
            bound = inputs**-0.5  # torch Conv1d's default initialisation
            uniform = keras.initializers.RandomUniform(-bound, bound)
            self.kernels.append(
                self.add_weight(
                    name=f"kernel_{k}", shape=(self.patches, inputs, outputs), initializer=uniform
                )
            )
            self.biases.append(
                self.add_weight(
                    name=f"bias_{k}", shape=(self.patches, outputs), initializer=uniform
                )
            )
            if k < 3:
                norm = _batch_norm(f"norm_{k}", self.dtype_policy)
                norm.build((None, None, self.patches * outputs))
                self.norms.append(norm)

    def call(self, latent, grid=None, training=None):
        batch, capsules = ops.shape(latent)[0], ops.shape(latent)[1]
        if grid is None:
            grid = keras.random.uniform(
                (batch, self.patches, capsules, 2), seed=self.seed_generator, dtype=latent.dtype
            )
        grid = ops.cast(grid, latent.dtype)
        z = ops.broadcast_to(latent[:, None], (batch, self.patches, capsules, latent.shape[-1]))
        x = ops.concatenate([grid, z], axis=-1)  # (b, m, l, 2 + dim)
        for k, (kernel, bias) in enumerate(zip(self.kernels, self.biases)):
            x = ops.einsum("bmlc,mco->bmlo", x, kernel) + bias[:, None, :]
            if k < 3:
                # Statistics per MLP and channel, over the batch and capsules.
                outputs = x.shape[-1]
                flat = ops.reshape(ops.transpose(x, (0, 2, 1, 3)), (batch, capsules, -1))
                flat = self.norms[k](flat, training=training)
                x = ops.transpose(
                    ops.reshape(flat, (batch, capsules, self.patches, outputs)), (0, 2, 1, 3)
                )
                x = ops.relu(x)
        return ops.reshape(ops.tanh(x), (batch, -1, 3))

    def compute_output_shape(self, latent_shape):
        capsules = latent_shape[1]
        return (latent_shape[0], None if capsules is None else self.patches * capsules, 3)

    def get_config(self):
        config = super().get_config()
        config.update(patches=self.patches, seed=self.seed)
        return config


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
    `(batch, n)`, `True` = keep, leaves padded points out. `model(points)`
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
            num_points // latent_capsules, seed=seed, name="decoder", dtype=dtype
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

    def _check_points(self, points_shape):
        if len(points_shape) != 3 or points_shape[-1] != 3:
            raise ValueError(
                "PointCapsNet expects point clouds of shape (batch, points, 3). "
                f"Received: points_shape={tuple(points_shape)}"
            )
        if points_shape[1] is not None and points_shape[1] < 1:
            raise ValueError(f"A cloud needs points. Received: points_shape={tuple(points_shape)}")

    def encode(self, points, mask=None, training=None):
        """The latent capsules `(batch, latent_capsules, latent_dim)` of
        clouds `(batch, n, 3)` of any `n`; `mask` `(batch, n)` drops
        points (`True` = keep)."""
        x = ops.convert_to_tensor(points, dtype=self.compute_dtype)
        self._check_points(tuple(x.shape))
        for dense, norm in zip(self.stem[::2], self.stem[1::2]):
            x = ops.relu(norm(dense(x), training=training, mask=mask))
        return self.latent(self.primary(x, mask=mask, training=training))

    def decode(self, latent, grid=None, training=None):
        """The points `(batch, num_points, 3)` of latent capsules; `grid`
        `(batch, num_points // latent_capsules, latent_capsules, 2)` fixes
        the decoder's 2-D points (drawn uniformly in [0, 1) by default)."""
        return self.decoder(latent, grid=grid, training=training)

    def scores_and_poses(self, points, training=None, mask=None):
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
