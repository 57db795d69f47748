"""SegCaps R3 (LaLonde & Bagci, 2018): capsules for object segmentation."""

import keras
from keras import ops

from keras_capsules import routing
from keras_capsules.conv import IMPLEMENTATIONS
from keras_capsules.layers.auto_conv2d import AutoConv2D
from keras_capsules.layers.length import Length
from keras_capsules.layers.local_capsule_2d import LocalCapsule2D
from keras_capsules.layers.local_deconv_capsule_2d import LocalDeconvCapsule2D
from keras_capsules.models.capsule_segmenter import CapsuleSegmenter
from keras_capsules.validation import non_negative_float, one_of

# The model halves the grid three times.
STRIDE = 8
POSE_DIM = 16  # the segmentation capsules' dimension


@keras.saving.register_keras_serializable(package="keras_capsules")
class SegCaps(CapsuleSegmenter):
    """SegCaps R3: a capsule U-Net whose per-pixel capsule lengths segment.

    The network of the paper (and of its authors' code), with locally
    constrained routing (`keras_capsules.layers.LocalCapsule2D`,
    `LocalDeconvCapsule2D`); `(types, dim)` per layer, `/2` a stride-2
    layer, `x2` a stride-2 deconvolution, `+` a skip connection (the child
    types concatenated):

    ```
    conv1      Conv2D(16, 5) + ReLU, as one capsule type of 16D  (H)
    primary    (2, 16) /2, 1 routing iteration                   (H/2)
    down       (4, 16), (4, 32) /2, (8, 32), (8, 64) /2, (8, 32)  (H/8)
    up         (8, 32) x2 + (8, 32), (4, 32), (4, 16) x2 + (4, 16),
               (4, 16), (2, 16) x2 + conv1                        (H)
    seg_caps   (num_classes, 16), 1x1
    scores     their lengths: (batch, H, W, num_classes) in [0, 1)
    ```

    5x5 kernels, 4x4 deconvolutions; every capsule layer but the primary
    one routes with its own copy of `router` (default
    `DynamicRouting(iterations=3)`, the paper's), the primary one with one
    iteration of dynamic routing, as in the paper. A decoder of three 1x1
    convolutions (64, 128 with ReLU, then `channels` with a sigmoid)
    reconstructs the input from the segmentation capsules masked by the
    labels, within the objects only, as in the paper:

    ```
    loss = compiled_loss(masks, scores)   # WeightedBinaryCrossentropy(positive_weight)
           + reconstruction_weight * mean((decoder(poses * masks) - images * any(masks))^2)
    ```

    `model.reconstruct(images)` masks by the prediction instead (scores
    `> 0.5`). Several foreground classes (`num_classes > 1`): one
    segmentation capsule type per class, each scored by its length and
    masked by its own mask (a pixel may belong to several, as in
    multi-label segmentation); with `num_classes=1` (the paper) the mask
    is the foreground.

    With one input channel and one class, the model has the paper's
    1.4 M parameters (1,425,649: `count_params()`).

    Masks and metrics are those of `CapsuleSegmenter`. Images in `[0, 1]`
    (the decoder's sigmoid).

    `compile(optimizer="auto", loss="auto", metrics="auto")`: Adam(1e-3,
    beta_1=0.99) (the authors' `beta_1`; their learning rate, 1e-4 for
    batches of one 512x512 slice, learns ~5x slower at batch 8 of small
    images), `WeightedBinaryCrossentropy(positive_weight)`, and the
    metrics `DiceCoefficient()` (`"dice"`) and `keras.metrics.BinaryIoU`
    of the foreground (`"iou"`). `fit(images, masks)` needs nothing more.

    Args:
        input_shape: image shape `(H, W, channels)`, `H` and `W` divisible
            by 8.
        num_classes: foreground classes, one segmentation capsule type each.
        router: the router of the routed layers but the primary one, or its
            name or config (`keras_capsules.routing.get`); each layer gets
            its own copy (`keras_capsules.routing.clone`). Default
            `DynamicRouting(iterations=3)`.
        positive_weight: the weight of foreground pixels in the default
            loss (the paper: background pixels / foreground pixels of the
            training set), `> 0`.
        reconstruction_weight: weight of the reconstruction error, `>= 0`
            (0.1 in the authors' code; 0 turns the decoder off).
        implementation: how the convolutions are computed (`"auto"`, ...:
            `keras_capsules.conv.resolve_implementation`); a speed option,
            not saved in the config.
        **kwargs: `keras.Model` arguments (`name`, `dtype`, ...).

    Call arguments:
        images: `(batch, H, W, channels)`.
        training: whether the layers run in training mode.
        return_poses: `True` for `(scores, poses (batch, H, W, num_classes,
            16))`.

    Returns:
        per-pixel scores `(batch, H, W, num_classes)`, or `(scores, poses)`.

    Example:

    >>> model = keras_capsules.models.SegCaps(
    ...     (16, 16, 1), router=keras_capsules.routing.DynamicRouting(iterations=1))
    >>> images = np.random.default_rng(0).uniform(size=(2, 16, 16, 1))
    >>> tuple(model(images).shape), tuple(model.reconstruct(images).shape)
    ((2, 16, 16, 1), (2, 16, 16, 1))
    >>> model.count_params()
    1425649

    Reference: LaLonde & Bagci, "Capsules for Object Segmentation", 2018
    (arXiv:1804.04241), SegCaps R3.
    """

    default_learning_rate = 1e-3

    def __init__(
        self,
        input_shape,
        num_classes=1,
        router=None,
        positive_weight=1.0,
        reconstruction_weight=0.1,
        implementation="auto",
        **kwargs,
    ):
        super().__init__(input_shape, num_classes, positive_weight=positive_weight, **kwargs)
        height, width, channels = self.image_shape
        if height % STRIDE or width % STRIDE:
            raise ValueError(
                f"SegCaps needs an image height and width divisible by {STRIDE} (it halves "
                f"the grid three times). Received: input_shape={tuple(input_shape)}"
            )
        # A config: each routed layer gets its own copy.
        self.router_config = None if router is None else routing.serialize(routing.get(router))
        self.reconstruction_weight = non_negative_float(
            reconstruction_weight, "reconstruction_weight"
        )
        self.implementation = one_of(implementation, IMPLEMENTATIONS, "implementation")
        self.encoder = self._build_encoder()
        self.scores = Length(name="scores", dtype=self.dtype_policy)
        # Built now, like every other layer: on JAX, `predict` runs a model
        # with an unbuilt layer once eagerly, op by op (a loaded SegCaps'
        # first `predict`: 449 small XLA compiles, 19 s on 2 CPU cores).
        self.scores.build(self.encoder.output.shape)
        self.decoder = self._build_decoder() if self.reconstruction_weight > 0 else None
        self.build((None, *self.image_shape))

    def _build_encoder(self):
        dtype, implementation = self.dtype_policy, self.implementation

        def router():
            return routing.clone(self.router_config or "dynamic", dtype=dtype)

        def local(types, dim, name, strides=1, kernel_size=5, router=router):
            return LocalCapsule2D(
                types,
                dim,
                kernel_size,
                strides=strides,
                router=router(),
                implementation=implementation,
                dtype=dtype,
                name=name,
            )

        def deconv(types, dim, name):
            return LocalDeconvCapsule2D(
                types,
                dim,
                4,
                strides=2,
                router=router(),
                dtype=dtype,
                name=name,
            )

        def join(name):
            return keras.layers.Concatenate(axis=-2, name=name, dtype=dtype)

        images = keras.Input(self.image_shape)
        conv1 = AutoConv2D(
            16,
            5,
            padding="same",
            activation="relu",
            implementation=implementation,
            dtype=dtype,
            name="conv1",
        )(images)
        conv1 = keras.layers.Reshape((*self.image_shape[:2], 1, 16), dtype=dtype)(conv1)
        # The paper's primary capsules route once, whatever the other layers do.
        primary = local(
            2,
            16,
            "primary_caps",
            strides=2,
            router=lambda: routing.DynamicRouting(iterations=1, dtype=dtype),
        )(conv1)
        down_2 = local(4, 16, "conv_cap_2_1")(primary)
        x = local(4, 32, "conv_cap_2_2", strides=2)(down_2)
        down_3 = local(8, 32, "conv_cap_3_1")(x)
        x = local(8, 64, "conv_cap_3_2", strides=2)(down_3)
        x = local(8, 32, "conv_cap_4_1")(x)
        x = join("up_1")([deconv(8, 32, "deconv_cap_1_1")(x), down_3])
        x = local(4, 32, "deconv_cap_1_2")(x)
        x = join("up_2")([deconv(4, 16, "deconv_cap_2_1")(x), down_2])
        x = local(4, 16, "deconv_cap_2_2")(x)
        x = join("up_3")([deconv(2, 16, "deconv_cap_3_1")(x), conv1])
        seg_caps = local(self.num_classes, POSE_DIM, "seg_caps", kernel_size=1)(x)
        return keras.Model(images, seg_caps, name="encoder")

    def _build_decoder(self):
        dtype = self.dtype_policy
        height, width, channels = self.image_shape

        def conv(filters, activation, name):
            return keras.layers.Conv2D(
                filters,
                1,
                activation=activation,
                kernel_initializer="he_normal",
                dtype=dtype,
                name=name,
            )

        return keras.Sequential(
            [
                keras.Input((height, width, self.num_classes * POSE_DIM)),
                conv(64, "relu", "recon_1"),
                conv(128, "relu", "recon_2"),
                conv(channels, "sigmoid", "out_recon"),
            ],
            name="decoder",
        )

    # The forward pass.

    def encode(self, images, training=None):
        """The segmentation capsules `(batch, H, W, num_classes, 16)`."""
        return self.encoder(images, training=training)

    def scores_and_poses(self, images, training=None):
        poses = self.encode(images, training=training)
        return self.scores(poses), poses

    def decode(self, poses, masks):
        """The decoder's image from `poses` masked by `masks` `(batch, H,
        W, num_classes)` (0/1)."""
        if self.decoder is None:
            raise ValueError(
                "This SegCaps has no decoder: it was built with reconstruction_weight=0."
            )
        masked = poses * ops.cast(masks, poses.dtype)[..., None]
        height, width = self.image_shape[:2]
        return self.decoder(ops.reshape(masked, (-1, height, width, self.num_classes * POSE_DIM)))

    def reconstruct(self, images, masks=None):
        """The reconstruction of `images` within `masks` (default: the
        predicted ones, scores `> 0.5`), `(batch, H, W, channels)`."""
        scores, poses = self.scores_and_poses(images, training=False)
        if masks is None:
            masks = ops.cast(scores > 0.5, poses.dtype)
        else:
            masks = self.targets(masks)
        return self.decode(poses, masks)

    # Compiling.

    def default_optimizer(self):
        """Adam(default_learning_rate, beta_1=0.99) (the authors' `beta_1`)."""
        return keras.optimizers.Adam(self.default_learning_rate, beta_1=0.99)

    def extra_loss(self, x, y, targets, poses, sample_weight=None, training=True):
        """`reconstruction_weight` times the masked reconstruction's mean
        squared error."""
        if self.decoder is None:
            return None
        if x is None:
            raise ValueError(
                "compute_loss needs the images `x` for the reconstruction loss. Received: x=None"
            )
        if poses is None:  # Scores from `model(x)`: encode x again.
            poses = self.encode(x, training=training)
        decoded = ops.cast(self.decode(poses, targets), "float32")
        foreground = ops.max(targets, axis=-1, keepdims=True)
        error = ops.mean(ops.square(decoded - ops.cast(x, "float32") * foreground), axis=(1, 2, 3))
        if sample_weight is not None:
            weights = ops.reshape(ops.cast(sample_weight, "float32"), (-1,))
            return (
                self.reconstruction_weight
                * ops.sum(error * weights)
                / ops.maximum(ops.sum(weights), 1e-7)
            )
        return self.reconstruction_weight * ops.mean(error)

    def get_config(self):
        config = super().get_config()
        config.update(router=self.router_config, reconstruction_weight=self.reconstruction_weight)
        return config
