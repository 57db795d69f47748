"""The matrix-capsule network of Hinton, Sabour & Frosst (2018)."""

import keras

from keras_capsules import routing
from keras_capsules.conv import IMPLEMENTATIONS
from keras_capsules.layers.auto_conv2d import AutoConv2D
from keras_capsules.layers.class_matrix_capsule import ClassMatrixCapsule
from keras_capsules.layers.conv_matrix_capsule import ConvMatrixCapsule
from keras_capsules.layers.primary_matrix_capsule import PrimaryMatrixCapsule
from keras_capsules.losses import SpreadLoss
from keras_capsules.models.capsule_model import CapsuleModel
from keras_capsules.validation import one_of, positive_float, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class MatrixCapsNet(CapsuleModel):
    """Matrix capsules with EM routing: 4x4 pose matrices and activations.

    ```
    images (32, 32, 2)
      -> AutoConv2D(conv_filters, 5, strides=2, relu)          (14, 14, A)
      -> PrimaryMatrixCapsule(primary_capsules, 1)             (14, 14, B) capsules
      -> ConvMatrixCapsule(conv_capsules1, 3, strides=2)       (6, 6, C)
      -> ConvMatrixCapsule(conv_capsules2, 3, strides=1)       (4, 4, D)
      -> ClassMatrixCapsule(num_classes, coordinate addition)
      -> activations (batch, num_classes): the class scores
    ```

    `A`, `B`, `C`, `D` are the paper's names of the four sizes (its Figure
    1). Each capsule is a 4x4 pose matrix and a sigmoid activation; the
    capsule layers route with their own copies of `router` (default
    `EMRouting(iterations=3)`; valid padding, as in the paper's Figure 1).
    `call` and `predict` return the class activations; `encode` returns
    `[poses (batch, num_classes, 16), activations]`. The first convolution
    is an `AutoConv2D` (how it is computed: `implementation`, see
    `keras_capsules.conv.resolve_implementation`).

    Training takes `(image, label)` pairs with class ids or one-hot labels:
    `compute_loss` one-hot encodes the labels and applies the compiled
    loss; `compile(loss="auto")` (the default), `loss=None` or no
    `compile` use the model's own `SpreadLoss(margin)`, `model.spread_loss`
    (Hinton et al. eq. 3):

    ```
    loss = mean_b sum_{i != t} relu(margin - (a_t - a_i))^2
    ```

    The paper raises the margin from 0.2 to 0.9 during training: pass
    `keras_capsules.callbacks.SpreadLossMarginScheduler(model.spread_loss,
    0.2, 0.9, steps)` to `fit` (it works inside the compiled train step
    with `jit_compile=True` on TensorFlow and JAX). Without it the margin
    stays at `margin`. There is no reconstruction decoder (the paper has
    none), so this model has no `reconstruct`.

    It keeps the contract of `keras_capsules.models.CapsuleModel`:
    `model(images, return_poses=True)` gives `(activations, poses)`;
    `compile(optimizer="auto", metrics="auto")` is Adam(3e-3), the paper's
    rate, and accuracy. `compile(jit_compile="auto")`, the default, also turns XLA on with
    TensorFlow on CPU (Keras's own `"auto"` leaves it off there), except
    with `run_eagerly=True` or under a `tf.distribute` strategy; pass
    `jit_compile=False` to opt out. `compile` then tells the first
    convolution whether XLA compiles it, for its `implementation="auto"`.

    Parameter count (`count_params()`, every weight is trainable): with
    the defaults (all four sizes 32, input (32, 32, 2), 5 classes) it is
    317,194 = 1,632 (conv: 5*5*2*32 + 32) + 17,952 (primary capsules:
    1*1*32*(32*16 + 32) + 32*17) + 2 * 147,520 (conv capsules: 3*3*32*32
    4x4 transforms, plus the EM router's beta_u and beta_a, 2*32) + 2,570
    (class capsules: 32*5 4x4 transforms + 2*5 betas). The paper's "310K"
    is for its single-channel input (800 fewer conv weights) and leaves the
    count's details open; the 138 EM betas are not in the paper's layer
    sizes.

    Args:
        input_shape: image shape `(height, width, channels)`; smallNORB's
            stereo pairs are `(32, 32, 2)`.
        num_classes: number of class capsules.
        conv_filters: channels of the first convolution (the paper's A).
        primary_capsules: primary capsule types (B).
        conv_capsules1, conv_capsules2: capsule types of the two
            convolutional capsule layers (C and D).
        router: the router of the three capsule layers, or its name or
            config (`keras_capsules.routing.get`); each layer gets its own
            copy (`keras_capsules.routing.clone`). Default
            `EMRouting(iterations=3)`.
        coordinate_addition: add the scaled position of each child to its
            class votes (the paper's coordinate addition).
        margin: initial margin of the model's own `SpreadLoss`.
        implementation: `"auto"`, `"conv"`, `"matmul"`, `"hybrid"` or
            `"space_to_depth"`, how the strided first convolution is computed (the rule:
            `keras_capsules.conv.resolve_implementation`); a speed option,
            not saved in the config.
        **kwargs: `keras.Model` arguments (`name`, `dtype`: the dtype
            policy of every layer, kept by `get_config`).

    Call arguments:
        images: `(batch, height, width, channels)`.
        training: whether the layers run in training mode.

    Returns:
        class activations `(batch, num_classes)`, in (0, 1).

    Example (small sizes; training as below, with the margin raised from
    0.2 to 0.9 over the first steps):

    >>> model = keras_capsules.models.MatrixCapsNet(
    ...     conv_filters=4, primary_capsules=2, conv_capsules1=2,
    ...     conv_capsules2=2, router=keras_capsules.routing.EMRouting(iterations=1))
    >>> rng = np.random.default_rng(0)
    >>> images, labels = rng.normal(size=(4, 32, 32, 2)), np.array([0, 1, 2, 3])
    >>> model.compile()  # Adam(3e-3), model.spread_loss, accuracy
    >>> scheduler = keras_capsules.callbacks.SpreadLossMarginScheduler(
    ...     model.spread_loss, start=0.2, end=0.9, steps=2)
    >>> history = model.fit(images, labels, batch_size=2, callbacks=[scheduler], verbose=0)
    >>> round(float(ops.convert_to_numpy(model.spread_loss.margin)), 2)  # set for step 1
    0.55
    >>> model.predict(images, verbose=0).shape
    (4, 5)

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018.
    """

    default_learning_rate = 3e-3

    def __init__(
        self,
        input_shape=(32, 32, 2),
        num_classes=5,
        conv_filters=32,
        primary_capsules=32,
        conv_capsules1=32,
        conv_capsules2=32,
        router=None,
        coordinate_addition=True,
        margin=0.2,
        implementation="auto",
        **kwargs,
    ):
        super().__init__(input_shape, num_classes, **kwargs)
        self.conv_filters = positive_int(conv_filters, "conv_filters")
        self.primary_capsules = positive_int(primary_capsules, "primary_capsules")
        self.conv_capsules1 = positive_int(conv_capsules1, "conv_capsules1")
        self.conv_capsules2 = positive_int(conv_capsules2, "conv_capsules2")
        # A config: each capsule layer gets its own copy (EM routing has weights).
        self.router_config = None if router is None else routing.serialize(routing.get(router))
        self.coordinate_addition = bool(coordinate_addition)
        self.margin = positive_float(margin, "margin")
        self.implementation = one_of(implementation, IMPLEMENTATIONS, "implementation")
        self.spread_loss = SpreadLoss(self.margin)
        # Tracked as a metric, so the compiled step reads the margin that
        # `SpreadLossMarginScheduler` sets (see there).
        self.spread_loss_margin = self.spread_loss.margin_state

        dtype = self.dtype_policy
        images = keras.Input(self.image_shape)
        x = AutoConv2D(
            self.conv_filters,
            5,
            strides=2,
            activation="relu",
            implementation=self.implementation,
            name="conv",
            dtype=dtype,
        )(images)
        capsules = PrimaryMatrixCapsule(
            self.primary_capsules, 1, name="primary_capsules", dtype=dtype
        )(x)
        capsules = ConvMatrixCapsule(
            self.conv_capsules1,
            3,
            strides=2,
            router=self._router(),
            name="conv_capsules1",
            dtype=dtype,
        )(capsules)
        capsules = ConvMatrixCapsule(
            self.conv_capsules2,
            3,
            strides=1,
            router=self._router(),
            name="conv_capsules2",
            dtype=dtype,
        )(capsules)
        outputs = ClassMatrixCapsule(
            self.num_classes,
            router=self._router(),
            coordinate_addition=self.coordinate_addition,
            name="class_capsules",
            dtype=dtype,
        )(capsules)
        self.network = keras.Model(images, outputs, name="matrix_capsules")
        self.build((None, *self.image_shape))

    def _router(self):
        """A new router for one capsule layer: `None` (the layer's default,
        `EMRouting()`) or a copy of `router`."""
        if self.router_config is None:
            return None
        return routing.clone(self.router_config, dtype=self.dtype_policy)

    def encode(self, images, training=None):
        """`[poses (batch, num_classes, 16), activations (batch, num_classes)]`."""
        return self.network(images, training=training)

    def scores_and_poses(self, images, training=None):
        poses, activations = self.encode(images, training=training)
        return activations, poses

    def default_loss(self):
        """`model.spread_loss`, the model's own `SpreadLoss(margin)`, whose
        margin `SpreadLossMarginScheduler` raises."""
        return self.spread_loss

    def get_config(self):
        config = super().get_config()  # name, trainable, dtype, input_shape, num_classes
        config.update(
            conv_filters=self.conv_filters,
            primary_capsules=self.primary_capsules,
            conv_capsules1=self.conv_capsules1,
            conv_capsules2=self.conv_capsules2,
            router=self.router_config,
            coordinate_addition=self.coordinate_addition,
            margin=self.margin,
        )
        return config
