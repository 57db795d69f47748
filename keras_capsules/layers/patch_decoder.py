"""An AtlasNet-style decoder of latent capsules into 3-D points (the decoder
of `models.PointCapsNet`)."""

import keras
from keras import ops

from keras_capsules.deprecation import renamed
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
    """AtlasNet-style decoder of latent capsules: `num_patches` MLPs, each fed
    a capsule and a 2-D point, give each capsule `num_patches` 3-D points.

    For latent capsules `z (batch, capsules, dim)` and a grid `g (batch,
    num_patches, capsules, 2)` of 2-D points in [0, 1):

    ```
    x[b, m, l] = concat(g[b, m, l], z[b, l])                  (2 + dim)
    x -> dense_m(D) -> BN -> ReLU -> dense_m(D // 2) -> BN -> ReLU
      -> dense_m(D // 4) -> BN -> ReLU -> dense_m(3) -> tanh     D = dim + 2
    points[b, m * capsules + l] = x[b, m, l]
    ```

    Each of the `num_patches` MLPs has its own weights (`dense_m`) and
    batch normalisation; all run as one batched matrix product per layer
    (the weights stacked `(num_patches, in, out)`). The grid is drawn
    uniformly at every call, as the authors' (`grid=` gives one instead).

    Args:
        num_patches: int, the number of MLPs (points per capsule); formerly
            `patches`, which still works, with a `DeprecationWarning`,
            until 0.4.0.
        seed: int or `None`, the seed of the grid's draws.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        latent: `(batch, capsules, dim)`.
        grid: optional `(batch, num_patches, capsules, 2)`.
        training: whether the batch normalisations use batch statistics.

    Returns:
        `(batch, num_patches * capsules, 3)` points in (-1, 1).

    Example:

    >>> decoder = keras_capsules.layers.PatchDecoder(4)
    >>> tuple(decoder(np.zeros((2, 8, 16))).shape)
    (2, 32, 3)

    Reference: Groueix et al., "AtlasNet: A Papier-Mache Approach to
    Learning 3D Surface Generation", CVPR 2018; Zhao, Birdal, Deng &
    Tombari, "3D Point Capsule Networks", CVPR 2019.
    """

    def __init__(self, num_patches=None, seed=None, **kwargs):
        num_patches = renamed(kwargs, "patches", "num_patches", num_patches, "PatchDecoder")
        super().__init__(**kwargs)
        self.num_patches = positive_int(num_patches, "num_patches")
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
                    name=f"kernel_{k}",
                    shape=(self.num_patches, inputs, outputs),
                    initializer=uniform,
                )
            )
            self.biases.append(
                self.add_weight(
                    name=f"bias_{k}", shape=(self.num_patches, outputs), initializer=uniform
                )
            )
            if k < 3:
                norm = _batch_norm(f"norm_{k}", self.dtype_policy)
                norm.build((None, None, self.num_patches * outputs))
                self.norms.append(norm)

    def call(self, latent, grid=None, training=None):
        batch, capsules = ops.shape(latent)[0], ops.shape(latent)[1]
        if grid is None:
            grid = keras.random.uniform(
                (batch, self.num_patches, capsules, 2), seed=self.seed_generator, dtype=latent.dtype
            )
        grid = ops.cast(grid, latent.dtype)
        z = ops.broadcast_to(latent[:, None], (batch, self.num_patches, capsules, latent.shape[-1]))
        x = ops.concatenate([grid, z], axis=-1)  # (b, m, l, 2 + dim)
        for k, (kernel, bias) in enumerate(zip(self.kernels, self.biases)):
            x = ops.einsum("bmlc,mco->bmlo", x, kernel) + bias[:, None, :]
            if k < 3:
                # Statistics per MLP and channel, over the batch and capsules.
                outputs = x.shape[-1]
                flat = ops.reshape(ops.transpose(x, (0, 2, 1, 3)), (batch, capsules, -1))
                flat = self.norms[k](flat, training=training)
                x = ops.transpose(
                    ops.reshape(flat, (batch, capsules, self.num_patches, outputs)), (0, 2, 1, 3)
                )
                x = ops.relu(x)
        return ops.reshape(ops.tanh(x), (batch, -1, 3))

    def compute_output_shape(self, latent_shape):
        capsules = latent_shape[1]
        return (latent_shape[0], None if capsules is None else self.num_patches * capsules, 3)

    def get_config(self):
        config = super().get_config()
        config.update(num_patches=self.num_patches, seed=self.seed)
        return config

    @property
    def patches(self):
        """The old name of `num_patches` (read-only); it goes in 0.4.0."""
        return self.num_patches
