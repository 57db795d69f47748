"""Heinsen's smallNORB classifier (Heinsen, 2019)."""

import keras
from keras import ops

from keras_capsules import routing
from keras_capsules.conv import IMPLEMENTATIONS
from keras_capsules.convert import heinsen
from keras_capsules.deprecation import renamed
from keras_capsules.layers.auto_conv2d import AutoConv2D
from keras_capsules.layers.heinsen_capsule import HeinsenCapsule
from keras_capsules.models.capsule_model import CapsuleModel
from keras_capsules.models.heinsen_capsnet_presets import HEINSEN_CAPSNET_PRESETS
from keras_capsules.models.presets import register_presets
from keras_capsules.validation import one_of, positive_int

# (strides) of the six 3x3 convolutions, valid padding.
_STRIDES = (1, 2, 1, 2, 1, 2)
# BatchNormalization as PyTorch's BatchNorm2d: eps 1e-5 and momentum 0.1
# (Keras's momentum is the weight of the old moving statistics: 0.9).
_BATCH_NORM = dict(epsilon=1e-5, momentum=0.9)


@keras.saving.register_keras_serializable(package="keras_capsules")
class HeinsenCapsNet(CapsuleModel):
    """Heinsen's smallNORB classifier: a convolutional stem, capsules of
    4x4 pose matrices and scores, two Heinsen routings.

    ```
    images (96, 96, 2) in [0, 1]
      -> append a coordinate grid: rows, then columns, linspace(-1, 1)  (96, 96, 4)
      -> 6 x [BatchNorm, Conv2D(channels, 3, strides 1,2,1,2,1,2, valid), swish]
                                                                      (9, 9, channels)
      -> scores: BatchNorm, Conv2D(parts, 1)         -> (parts * 9 * 9,) logits
         poses:  BatchNorm, Conv2D(parts * 16, 1)    -> (parts * 9 * 9, 4, 4)
      -> HeinsenCapsule(parts, 4, share_weights=True)       (parts, 4, 4), (parts,)
      -> HeinsenCapsule(num_classes, 4)                     (num_classes, 4, 4), (num_classes,)
    each routing with its own copy of `router` (default
    HeinsenRouting(iterations=3, epsilon=1e-5)), sharing its weights over
    the children in the first layer (`share_weights=True`)
    ```

    The capsules are ordered `(part, row, column)` and pose channel `p *
    16 + 4 * r + c` is row `r`, column `c` of part `p`'s matrix, as in the
    official code (so its weights load unchanged:
    `load_authors_weights`). The first routing shares its weights over
    its `parts * 9 * 9` children (any input size works); the second has
    weights per child. BatchNormalization is PyTorch's (`epsilon=1e-5`,
    momentum 0.1, which is Keras's `momentum=0.9`).

    It keeps the contract of `keras_capsules.models.CapsuleModel`:
    `model(images)` and `predict` give the class scores `a_out` (logits,
    `(batch, num_classes)`); `model(images, return_poses=True)` gives
    `(scores, poses)`, poses `(batch, num_classes, 4, 4)`;
    `model.encode(images)` gives the author's triple `(scores, poses,
    variances)`, the variances of the poses' elements of the same shape.
    `compile(loss="auto")` is the author's softmax cross-entropy on the
    scores (`CategoricalCrossentropy(from_logits=True)`: it takes mixup's
    soft labels too), `metrics="auto"` accuracy, `optimizer="auto"`
    Adam(5e-4), the author's peak rate (he trained with RAdam and a
    one-cycle schedule: `examples/smallnorb_heinsen_capsnet.py`).

    Parameter count with the defaults: 272,592 (`count_params()`), of
    which 271,688 trainable (the official state dict's parameters) and
    904 BatchNormalization moving statistics.

    Args:
        input_shape: image shape `(height, width, channels)`, channels
            last; smallNORB's stereo pairs `(96, 96, 2)`.
        num_classes: number of class capsules (smallNORB: 5).
        num_parts: capsules per position of the part layer (`n_parts`;
            formerly `parts`).
        channels: channels of the six convolutions (`d_chns`).
        router: the router of both capsule layers, or its name or config
            (`keras_capsules.routing.get`): each layer gets its own copy
            (`keras_capsules.routing.clone`), whose `share_weights` is the
            layer's when the router has that argument; it must take and give
            logits (`HeinsenCapsule`). Default `HeinsenRouting(iterations=3,
            epsilon=1e-5)`, the author's.
        implementation: how the convolutions are computed (`"auto"`,
            `"conv"`, ...: see `keras_capsules.layers.AutoConv2D`); a speed
            option, not saved in the config.
        **kwargs: `keras.Model` arguments (`name`, `dtype`).

    Call arguments:
        images: `(batch, height, width, channels)`, values in [0, 1].
        training: BatchNormalization's mode.
        return_poses: see `CapsuleModel`.

    Returns:
        class scores `a_out`, logits `(batch, num_classes)`, or `(scores,
        poses)`.

    Example (small sizes; the defaults are the author's):

    >>> model = keras_capsules.models.HeinsenCapsNet(
    ...     (32, 32, 2), num_classes=3, num_parts=4, channels=8)
    >>> images = np.random.default_rng(0).uniform(size=(2, 32, 32, 2))
    >>> model.predict(images, verbose=0).shape  # the scores a_out
    (2, 3)
    >>> model.compile()  # Adam(5e-4), softmax cross-entropy, accuracy

    The author's three outputs, and one training step:

    ```python
    scores, poses, variances = model.encode(images)  # (2, 3), (2, 3, 4, 4), (2, 3, 4, 4)
    model.fit(images, np.array([0, 2]))
    ```

    With the author's released weights (`heinsen_smallNORB_pretrained_model_state_dict.pt`
    of github.com/glassroom/heinsen_routing; the paper reports 99.1% test
    accuracy on smallNORB):

    ```python
    model = keras_capsules.models.HeinsenCapsNet()
    model.load_authors_weights("smallNORB_pretrained_model_state_dict.pt")
    scores = model.predict(images_uint8 / 255.0)
    ```

    Reference: Heinsen, "An Algorithm for Routing Capsules in All Domains",
    arXiv:1911.00792, 2019 (the smallNORB model: `SmallNORBClassifier` of
    github.com/glassroom/heinsen_routing at commit cd3420d).
    """

    default_learning_rate = 5e-4
    # XLA on TensorFlow's CPU: 6.8 s per train step of 20 against 3.4 s
    # without (2 cores), so `compile(jit_compile="auto")` leaves it off.
    xla_on_cpu = False

    def __init__(
        self,
        input_shape=(96, 96, 2),
        num_classes=5,
        num_parts=None,
        channels=64,
        router=None,
        implementation="auto",
        **kwargs,
    ):
        num_parts = renamed(kwargs, "parts", "num_parts", num_parts, "HeinsenCapsNet")
        super().__init__(input_shape, num_classes, **kwargs)
        self.num_parts = positive_int(64 if num_parts is None else num_parts, "num_parts")
        self.channels = positive_int(channels, "channels")
        # A config: each capsule layer gets its own copy (the router has weights).
        self.router_config = None if router is None else routing.serialize(routing.get(router))
        self.implementation = one_of(implementation, IMPLEMENTATIONS, "implementation")
        dtype = self.dtype_policy
        height, width, depth = self.image_shape
        inputs = keras.Input((height, width, depth + 2))
        x = inputs
        for i, strides in enumerate(_STRIDES):
            x = keras.layers.BatchNormalization(**_BATCH_NORM, name=f"bn{i + 1}", dtype=dtype)(x)
            x = AutoConv2D(
                self.channels,
                3,
                strides=strides,
                kernel_initializer="he_normal",
                implementation=self.implementation,
                name=f"conv{i + 1}",
                dtype=dtype,
            )(x)
            x = keras.layers.Activation("silu", name=f"swish{i + 1}", dtype=dtype)(x)
        grid = x.shape[1:3]
        if None in grid or min(grid) < 1:
            raise ValueError(
                "HeinsenCapsNet's six 3x3 convolutions need images of at least 31x31. "
                f"Received: input_shape={self.image_shape}"
            )
        a = keras.layers.BatchNormalization(**_BATCH_NORM, name="scores_bn", dtype=dtype)(x)
        a = keras.layers.Conv2D(self.num_parts, 1, name="scores_conv", dtype=dtype)(a)
        mu = keras.layers.BatchNormalization(**_BATCH_NORM, name="poses_bn", dtype=dtype)(x)
        mu = keras.layers.Conv2D(self.num_parts * 16, 1, name="poses_conv", dtype=dtype)(mu)
        children = self.num_parts * grid[0] * grid[1]
        # (batch, H, W, parts) -> (batch, parts * H * W): the author's order.
        a = keras.layers.Permute((3, 1, 2), dtype=dtype)(a)
        a = keras.layers.Reshape((children,), dtype=dtype)(a)
        # (batch, H, W, parts * 16) -> (batch, parts, H, W, 4, 4) -> children.
        mu = keras.layers.Reshape((*grid, self.num_parts, 4, 4), dtype=dtype)(mu)
        mu = keras.layers.Permute((3, 1, 2, 4, 5), dtype=dtype)(mu)
        mu = keras.layers.Reshape((children, 4, 4), dtype=dtype)(mu)
        mu, a = HeinsenCapsule(
            self.num_parts,
            4,
            router=self._router(share_weights=True),
            share_weights=True,
            name="part_capsules",
            dtype=dtype,
        )([mu, a])
        mu, a, sig2 = HeinsenCapsule(
            self.num_classes,
            4,
            router=self._router(share_weights=False),
            return_variances=True,
            name="class_capsules",
            dtype=dtype,
        )([mu, a])
        self.network = keras.Model(inputs, [a, mu, sig2], name="heinsen_capsules")
        self.build((None, *self.image_shape))

    def _router(self, share_weights):
        """A new router for one capsule layer: `None` (the layer's default,
        the author's routing) or a copy of `router`."""
        if self.router_config is None:
            return None
        router = routing.get(self.router_config)
        overrides = {"share_weights": share_weights} if router.accepts_share_weights else {}
        return routing.clone(router, dtype=self.dtype_policy, **overrides)

    def add_coordinate_grid(self, images):
        """`images (batch, H, W, C)` with two channels appended: the row
        coordinate `linspace(-1, 1, H)` and the column one, `linspace(-1,
        1, W)` (the author's `add_coord_grid`, channels last)."""
        height, width = self.image_shape[:2]
        rows = ops.linspace(-1.0, 1.0, height, dtype=images.dtype)
        cols = ops.linspace(-1.0, 1.0, width, dtype=images.dtype)
        grid = ops.stack(
            [
                ops.broadcast_to(rows[:, None], (height, width)),
                ops.broadcast_to(cols[None, :], (height, width)),
            ],
            axis=-1,
        )
        grid = ops.broadcast_to(grid[None], (ops.shape(images)[0], height, width, 2))
        return ops.concatenate([images, grid], axis=-1)

    def encode(self, images, training=None):
        """The author's outputs: `(scores (batch, num_classes), poses (batch,
        num_classes, 4, 4), variances (batch, num_classes, 4, 4))`."""
        images = ops.cast(images, self.compute_dtype)
        return tuple(self.network(self.add_coordinate_grid(images), training=training))

    def scores_and_poses(self, images, training=None):
        scores, poses, _ = self.encode(images, training=training)
        return scores, poses

    def default_loss(self):
        """The author's softmax cross-entropy on the scores (logits)."""
        return keras.losses.CategoricalCrossentropy(from_logits=True)

    def load_authors_weights(self, path):
        """Sets every weight from the author's PyTorch state dict file (the
        released `smallNORB_pretrained_model_state_dict.pt`), read by
        `keras_capsules.convert.torch_zip.read_state_dict`; see
        `load_authors_state_dict`.

        Args:
            path: the `.pt` file.

        Returns:
            the model.
        """
        return heinsen.load_authors_weights(self, path)

    def load_authors_state_dict(self, state_dict):
        """Sets every weight from the author's state dict, `{name: numpy
        array}` of his `SmallNORBClassifier` of this model's sizes, mapped
        by `keras_capsules.convert.heinsen.load_state_dict` (which raises a
        `ValueError` naming the key on a missing or unexpected key or a
        wrong shape).

        Args:
            state_dict: `{name: numpy array}`.

        Returns:
            the model.
        """
        return heinsen.load_state_dict(self, state_dict)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_parts=self.num_parts,
            channels=self.channels,
            router=self.router_config,
        )
        return config


register_presets(HEINSEN_CAPSNET_PRESETS, HeinsenCapsNet)
