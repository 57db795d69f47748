"""Capsule lengths, the usual class scores of a capsule network."""

import keras

from keras_capsules.ops import safe_norm
from keras_capsules.validation import positive_float


@keras.saving.register_keras_serializable(package="keras_capsules")
class Length(keras.layers.Layer):
    """Length of each capsule: `safe_norm(poses, axis=-1)`.

    ```
    lengths[b, ..., j] = sqrt(sum_d poses[b, ..., j, d]^2 + epsilon)
    ```

    The norm is differentiable at zero (and computed in float32 under
    half-precision policies).

    Args:
        epsilon: float, added under the square root, `> 0`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: capsules of shape `(batch, ..., num_caps, dim)`.

    Returns:
        Lengths of shape `(batch, ..., num_caps)`.

    Example:

    >>> poses = np.array([[[3.0, 4.0], [0.0, 0.0]]], "float32")   # (1, 2, 2)
    >>> ops.convert_to_numpy(keras_capsules.layers.Length()(poses)).round(3)
    array([[5., 0.]], dtype=float32)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (class probability = capsule length).
    """

    def __init__(self, epsilon=1e-7, **kwargs):
        super().__init__(**kwargs)
        # epsilon = 0 makes the gradient at a zero capsule 0 / 0.
        self.epsilon = positive_float(epsilon, "epsilon")

    def build(self, input_shape):
        if len(input_shape) < 2:
            raise ValueError(
                "Length expects capsules of shape (batch, ..., dim). "
                f"Received: input_shape={tuple(input_shape)}"
            )
        # Any capsules of rank >= 2 later (the layer has no weights); the
        # batch axis alone is refused when called.
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def call(self, inputs):
        return safe_norm(inputs, axis=-1, epsilon=self.epsilon)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1])

    def get_config(self):
        config = super().get_config()
        config.update(epsilon=self.epsilon)
        return config
