"""Class matrix capsules (Hinton, Sabour & Frosst, 2018): every child of the
grid votes for every class, with coordinate addition."""

import keras
import numpy as np
from keras import ops

from keras_capsules.layers._matrix_pose import (
    POSE_SIZE,
    check_matrix_inputs,
    matrix_transform_initializer,
    pose_votes,
)
from keras_capsules.layers.base_routed_capsule import RoutedCapsule
from keras_capsules.ops import compute_dtype_for
from keras_capsules.validation import boolean, built_input_spec


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
        self.coordinate_addition = boolean(coordinate_addition, "coordinate_addition")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def build(self, input_shape):
        poses_shape, activations_shape = check_matrix_inputs(self.__class__.__name__, input_shape)
        if any(n is None for n in poses_shape[1:4]):
            raise ValueError(
                "ClassMatrixCapsule needs a known grid and types. "
                f"Received: poses.shape={poses_shape}"
            )
        # A built layer refuses other types (and ranks) when called; the
        # grid may change (the coordinates are those of the grid received).
        self.input_spec = [
            built_input_spec(poses_shape, (-2, -1)),
            built_input_spec(activations_shape, (-1,)),
        ]
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
