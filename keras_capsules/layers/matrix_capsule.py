"""Matrix capsules (Hinton, Sabour & Frosst, 2018): 4x4 poses and activations."""

import math

import keras
import numpy as np
from keras import ops

from keras_capsules.initializers import (
    MATRIX_POSE_STDDEV,
    MATRIX_ROW_LENGTH,
    transform_initializer,
)
from keras_capsules.layers.base_routed_capsule import RoutedCapsule
from keras_capsules.layers.primary_convolution import PrimaryConvolution
from keras_capsules.layers.windowed_capsule import WindowedCapsule
from keras_capsules.ops import compute_dtype_for

POSE_SIZE = 16  # a 4x4 pose matrix, stored row-major


def check_matrix_inputs(layer_name, input_shape):
    """`[poses (batch, H, W, types, 16), activations (batch, H, W, types)]`
    -> the two shapes, as tuples; raises a `ValueError` naming the layer
    for any other inputs."""
    if not (
        isinstance(input_shape, (list, tuple))
        and len(input_shape) == 2
        and isinstance(input_shape[0], (list, tuple))
    ):
        raise ValueError(
            f"{layer_name} expects [poses, activations]. Received: input_shape={input_shape}"
        )
    poses_shape, activations_shape = (tuple(s) for s in input_shape)
    if len(poses_shape) != 5 or poses_shape[-1] != POSE_SIZE:
        raise ValueError(
            f"{layer_name} expects poses of shape (batch, H, W, types, 16) "
            f"(4x4 pose matrices). Received: poses.shape={poses_shape}"
        )
    if activations_shape[1:] != poses_shape[1:-1]:
        raise ValueError(
            f"{layer_name} expects activations of shape {(None, *poses_shape[1:-1])}. "
            f"Received: activations.shape={activations_shape}"
        )
    return poses_shape, activations_shape


def _primary_matrix_initializers():
    """`PrimaryMatrixCapsule`'s default (kernel, bias) initializers per
    convolution: poses with elements of standard deviation
    `MATRIX_POSE_STDDEV`, also where the inputs are small (the bias), and
    Keras's `glorot_uniform` activation kernel (activations near 0.5)."""
    pose_variance = MATRIX_POSE_STDDEV**2
    return {
        "pose": (
            lambda: keras.initializers.VarianceScaling(pose_variance, "fan_in", "truncated_normal"),
            lambda: keras.initializers.RandomNormal(stddev=MATRIX_POSE_STDDEV),
        ),
        "activation": (
            lambda: keras.initializers.GlorotUniform(),
            lambda: keras.initializers.Zeros(),
        ),
    }


def matrix_transform_initializer(router, children, parents):
    """A function making the default initializer of 4x4 transforms `W`: votes
    of child poses with elements of standard deviation `MATRIX_POSE_STDDEV`
    get the router's `vote_stddev`."""
    vote_stddev = router.vote_stddev(children, parents, POSE_SIZE)
    return lambda: transform_initializer(vote_stddev, MATRIX_ROW_LENGTH)


def pose_votes(matrices, kernel, dtype=None):
    """`votes[n, t, j] = matrices[n, t] @ kernel[t, j]` for `(n, t, 4, 4)`
    matrices and a `(t, j, 4, 4)` kernel: `(n, t, j, 16)`, row-major, in
    `dtype` (the layers pass the routing dtype: float32 under half
    policies, where half-precision votes of large poses overflow).

    One matmul batched over `t`, `(t, n*4, 4) @ (t, 4, j*4)`, with
    transposes of at most 5 dimensions, not an einsum: tf2onnx's einsum
    optimizer searches the orderings of 7-8 letters for minutes, and on
    TensorFlow the einsum needs a 7-D transpose that TFLite runs only with
    Select TF ops. A broadcasting `(n, t, 1, 4, 4) @ (t, j, 4, 4)` matmul
    exports too but is slower than the einsum on torch (it expands both
    operands).
    """
    if dtype is not None:
        matrices, kernel = ops.cast(matrices, dtype), ops.cast(kernel, dtype)
    types, out = kernel.shape[:2]
    a = ops.reshape(ops.transpose(matrices, (1, 0, 2, 3)), (types, -1, 4))
    b = ops.reshape(ops.transpose(kernel, (0, 2, 1, 3)), (types, 4, out * 4))
    votes = ops.reshape(ops.matmul(a, b), (types, -1, 4, out, 4))
    # Copied once into parent-major memory, (n, j, t, 16), and returned as
    # its (n, t, j, 16) transpose: the router's parent-major copy
    # (routing/parent_major.py) is then a view on torch, not a second pass
    # over the votes (forward and backward). For XLA, transposes only.
    votes = ops.reshape(ops.transpose(votes, (1, 3, 0, 2, 4)), (-1, out, types, POSE_SIZE))
    return ops.transpose(votes, (0, 2, 1, 3))


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryMatrixCapsule(PrimaryConvolution):
    """Primary matrix capsules: a pose conv and an activation conv.

    ```
    poses       = reshape(conv2d(x, W_pose) + b_pose, (batch, H', W', n, 16))
    activations = sigmoid(conv2d(x, W_act) + b_act)          # (batch, H', W', n)
    ```

    Both convolutions run as one, on the kernels concatenated along the
    output channels. Poses are 4x4 matrices, as `ConvMatrixCapsule` and
    `ClassMatrixCapsule` take them.

    Args:
        num_capsules: int, capsule types `n` per position (32 in the paper).
        kernel_size, strides: int or pair (1 and 1 in the paper).
        padding: `"valid"` or `"same"`.
        implementation: how the convolution is computed: `"conv"`,
            `"matmul"`, `"hybrid"`, `"space_to_depth"` or `"auto"` (the
            same numbers; see `keras_capsules.conv.resolve_implementation`); a speed option, not
            saved in the config.
        kernel_initializer, bias_initializer: initializers of both
            convolutions' kernels (`W_pose`, `W_act`) and biases (`b_pose`,
            `b_act`); `None`, the default: poses start with elements of
            standard deviation 0.2 whatever the inputs' scale (pose kernel
            of variance `0.04 / fan_in`, pose bias of standard deviation
            0.2), and a `glorot_uniform` activation kernel with zero bias
            (activations near 0.5); see `keras_capsules.initializers`.
        kernel_regularizer, bias_regularizer: regularizers of both kernels
            and of both biases, or `None`.
        kernel_constraint, bias_constraint: constraints on both kernels and
            on both biases, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: images (feature maps) `x` of shape `(batch, height, width,
            channels)`.

    Returns:
        `[poses, activations]`: poses of shape `(batch, H', W', num_capsules,
        16)` (row-major 4x4 pose matrices) and activations in
        `(0, 1)` of shape `(batch, H', W', num_capsules)`, `H', W'` as for a
        convolution.

    Example:

    >>> x = keras.Input((14, 14, 32))
    >>> poses, activations = keras_capsules.layers.PrimaryMatrixCapsule(8)(x)
    >>> poses.shape, activations.shape
    ((None, 14, 14, 8, 16), (None, 14, 14, 8))

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018.
    """

    def __init__(
        self,
        num_capsules,
        kernel_size=1,
        strides=1,
        padding="valid",
        implementation="auto",
        kernel_initializer=None,
        bias_initializer=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(
            num_capsules,
            kernel_size,
            strides=strides,
            padding=padding,
            implementation=implementation,
            kernel_initializer=kernel_initializer,
            bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer,
            bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint,
            bias_constraint=bias_constraint,
            **kwargs,
        )

    def build(self, input_shape):
        self._check_inputs(input_shape)
        pose_filters = self.num_capsules * POSE_SIZE
        defaults = _primary_matrix_initializers()
        for name, filters in (("pose", pose_filters), ("activation", self.num_capsules)):
            kernel_default, bias_default = defaults[name]
            setattr(
                self,
                f"{name}_kernel",
                self.add_weight(
                    name=f"{name}_kernel",
                    shape=(*self.kernel_size, input_shape[-1], filters),
                    initializer=self.kernel_initializer or kernel_default(),
                    regularizer=self.kernel_regularizer,
                    constraint=self.kernel_constraint,
                ),
            )
            setattr(
                self,
                f"{name}_bias",
                self.add_weight(
                    name=f"{name}_bias",
                    shape=(filters,),
                    initializer=self.bias_initializer or bias_default(),
                    regularizer=self.bias_regularizer,
                    constraint=self.bias_constraint,
                ),
            )

    def call(self, inputs):
        kernel = ops.concatenate([self.pose_kernel, self.activation_kernel], axis=-1)
        bias = ops.concatenate([self.pose_bias, self.activation_bias], axis=-1)
        y = self._conv(inputs, kernel, bias)
        pose_filters = self.num_capsules * POSE_SIZE
        grid = (-1, *y.shape[1:3], self.num_capsules)
        poses = ops.reshape(y[..., :pose_filters], (*grid, POSE_SIZE))
        activations = ops.sigmoid(y[..., pose_filters:])
        return [poses, activations]

    def compute_output_shape(self, input_shape):
        grid = (input_shape[0], *self._output_grid(input_shape), self.num_capsules)
        return [(*grid, POSE_SIZE), grid]


@keras.saving.register_keras_serializable(package="keras_capsules")
class ConvMatrixCapsule(WindowedCapsule):
    """Convolutional matrix capsules with routing inside each window.

    For output position `p`, each child of its `k x k` window (kernel
    offset `o`, child type `t`, 4x4 pose `M`) votes for each parent type `j`
    with its pose times a learned 4x4 transform:

    ```
    votes[b, p, (o, t), j] = M[b, p * s + o, t] @ W[o, t, j]     # 4x4, row-major
    poses[b, p], activations[b, p] = router(votes[b, p], a[b, p * s + o, t])
    ```

    The router (default `EMRouting()`) runs inside each window: its
    `k * k * types` children compete only among that window's parents
    (window positions are folded into the batch axis).

    Args:
        num_capsules: int, parent capsule types per position.
        kernel_size, strides: int or pair, the window and its step `s`.
        padding: `"valid"` (the paper) or `"same"`.
        router: a router, or its name or config (`keras_capsules.routing.get`);
            default `EMRouting()`.
        kernel_initializer: initializer of `W`, shape `(kh, kw, types,
            num_capsules, 4, 4)`; `None`, the default: a truncated normal
            that gives child poses with elements of standard deviation 0.2
            (what `PrimaryMatrixCapsule` and EM routing start with) votes of
            the router's `vote_stddev` (unit variance for EM), with `kh * kw
            * types` children (`keras_capsules.initializers`).
        kernel_regularizer: regularizer of `W`, or `None`.
        kernel_constraint: constraint on `W`, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `[poses, activations]`, child poses `M` of shape `(batch, H,
            W, types, 16)` (row-major 4x4 matrices) and activations `a` of
            shape `(batch, H, W, types)`.

    Returns:
        `[poses, activations]` of shapes `(batch, H', W', num_capsules, 16)`
        and `(batch, H', W', num_capsules)`, `H', W'` as for a convolution.

    Example:

    >>> poses, activations = keras.Input((14, 14, 32, 16)), keras.Input((14, 14, 32))
    >>> layer = keras_capsules.layers.ConvMatrixCapsule(32, 3, strides=2)
    >>> [t.shape for t in layer([poses, activations])]
    [(None, 6, 6, 32, 16), (None, 6, 6, 32)]

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018.
    """

    rank = 2
    default_router = "em"
    length_coded = False  # 4x4 pose matrices and their own activations
    pose_kind = "matrix"
    router_activations = "probabilities"

    def __init__(
        self,
        num_capsules,
        kernel_size=3,
        strides=1,
        padding="valid",
        router=None,
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

    def _grid_shapes(self, input_shape):
        return check_matrix_inputs(self.__class__.__name__, input_shape)

    def _kernel_shape(self, types, in_dim):
        return (*self.kernel_size, types, self.num_capsules, 4, 4)

    def _default_kernel_initializer(self, types, in_dim):
        children = math.prod(self.kernel_size) * types
        return matrix_transform_initializer(self.router, children, self.num_capsules)

    def _out_dim(self, in_dim):
        return POSE_SIZE

    def _votes(self, windows):
        k, types = windows.shape[1:3]
        matrices = ops.reshape(windows, (-1, k * types, 4, 4))
        kernel = ops.reshape(self.kernel, (k * types, self.num_capsules, 4, 4))
        votes = pose_votes(matrices, kernel, compute_dtype_for(self.compute_dtype))
        return ops.reshape(votes, (-1, k * types, self.num_capsules, POSE_SIZE))

    def call(self, inputs, return_coefficients=False):
        poses, activations = inputs
        outputs = self._route_windows(poses, activations, return_coefficients)
        return (list(outputs[:2]), outputs[2]) if return_coefficients else list(outputs)

    def compute_output_shape(self, input_shape):
        return list(self._output_shapes(input_shape))


@keras.saving.register_keras_serializable(package="keras_capsules")
class ClassMatrixCapsule(RoutedCapsule):
    """Class capsules: every child of the grid votes for every class.

    One 4x4 transform per (child type, class), shared over positions. With
    coordinate addition, the scaled centre of the child's position is
    added to the first two entries of the right-hand column of its vote
    (elements 3 and 7 of the row-major 4x4 vote):

    ```
    votes[b, (h, w, t), c] = M[b, h, w, t] @ W[t, c]                 # 4x4
    votes[..., 3] += (h + 0.5) / H;  votes[..., 7] += (w + 0.5) / W
    poses, activations = router(votes, a[b, (h, w, t)])
    ```

    Default router: `EMRouting()`.

    Args:
        num_capsules: int, number of class capsules (one per class).
        router: a router, or its name or config (`keras_capsules.routing.get`);
            default `EMRouting()`.
        coordinate_addition: bool, add the scaled child coordinates to the
            votes.
        kernel_initializer: initializer of `W`, shape `(types, num_capsules,
            4, 4)`; `None`, the default: as for `ConvMatrixCapsule`, with
            `H * W * types` children.
        kernel_regularizer: regularizer of `W`, or `None`.
        kernel_constraint: constraint on `W`, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `[poses, activations]`, child poses `M` of shape `(batch, H,
            W, types, 16)` (row-major 4x4 matrices, `H`, `W` and `types`
            known) and activations `a` of shape `(batch, H, W, types)`.

    Returns:
        `[poses, activations]` of shapes `(batch, num_capsules, 16)` and
        `(batch, num_capsules)`.

    Example:

    >>> poses, activations = keras.Input((4, 4, 16, 16)), keras.Input((4, 4, 16))
    >>> layer = keras_capsules.layers.ClassMatrixCapsule(5)
    >>> [t.shape for t in layer([poses, activations])]
    [(None, 5, 16), (None, 5)]

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018 (coordinate addition, section 2.1: the paper adds the scaled
    coordinates to the first two elements of the vote's right-hand column;
    this layer takes each position's centre, `(row + 0.5) / H`).
    """

    default_router = "em"
    length_coded = False  # 4x4 pose matrices and their own activations
    pose_kind = "matrix"
    router_activations = "probabilities"

    def __init__(
        self,
        num_capsules,
        router=None,
        coordinate_addition=True,
        kernel_initializer=None,
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(num_capsules, router, **kwargs)
        self.coordinate_addition = bool(coordinate_addition)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def build(self, input_shape):
        poses_shape, _ = check_matrix_inputs(self.__class__.__name__, input_shape)
        if any(n is None for n in poses_shape[1:4]):
            raise ValueError(
                "ClassMatrixCapsule needs a known grid and types. "
                f"Received: poses.shape={poses_shape}"
            )
        height, width, types = poses_shape[1:4]
        in_caps = height * width * types
        self.kernel = self.add_weight(
            name="kernel",
            shape=(types, self.num_capsules, 4, 4),
            initializer=self.kernel_initializer
            or matrix_transform_initializer(self.router, in_caps, self.num_capsules)(),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.build_router((None, in_caps, self.num_capsules, POSE_SIZE), (None, in_caps))

    def call(self, inputs, return_coefficients=False):
        poses, activations = inputs
        height, width, types = poses.shape[1:4]
        votes = pose_votes(
            ops.reshape(poses, (-1, types, 4, 4)),
            self.kernel,
            compute_dtype_for(self.compute_dtype),
        )
        votes = ops.reshape(votes, (-1, height, width, types, self.num_capsules, POSE_SIZE))
        if self.coordinate_addition:
            votes = votes + ops.convert_to_tensor(
                coordinate_offsets(height, width), dtype=votes.dtype
            )
        votes = ops.reshape(votes, (-1, height * width * types, self.num_capsules, POSE_SIZE))
        activations = ops.reshape(activations, (-1, height * width * types))
        outputs = self.route(votes, activations, return_coefficients=return_coefficients)
        return (list(outputs[:2]), outputs[2]) if return_coefficients else list(outputs)

    def compute_output_shape(self, input_shape):
        poses_shape, _ = check_matrix_inputs(self.__class__.__name__, input_shape)
        batch = poses_shape[0]
        return [(batch, self.num_capsules, POSE_SIZE), (batch, self.num_capsules)]

    def compute_coefficients_shape(self, input_shape):
        poses_shape, _ = check_matrix_inputs(self.__class__.__name__, input_shape)
        batch, height, width, types = poses_shape[:4]
        return (batch, height * width * types, self.num_capsules)

    def get_config(self):
        config = super().get_config()
        config.update(
            coordinate_addition=self.coordinate_addition,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
        )
        return config


def coordinate_offsets(height, width):
    """`(H, W, 1, 1, 16)` array: scaled centres at vote elements 3 and 7."""
    offsets = np.zeros((height, width, 1, 1, POSE_SIZE), "float32")
    offsets[..., 3] = ((np.arange(height) + 0.5) / height)[:, None, None, None]
    offsets[..., 7] = ((np.arange(width) + 0.5) / width)[None, :, None, None]
    return offsets
