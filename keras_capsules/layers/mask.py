"""Masking capsules by label, for the reconstruction decoder."""

import keras
from keras import ops

from keras_capsules.layers.capsule import split_capsule_inputs
from keras_capsules.ops import safe_norm


@keras.saving.register_keras_serializable(package="keras_capsules")
class Mask(keras.layers.Layer):
    """Keeps one capsule per example and flattens, as the decoder expects.

    `Mask()([poses, labels])` keeps the capsule of the true class (`labels`
    one-hot `(batch, num_caps)`, or integer class ids `(batch,)`);
    `Mask()(poses)` keeps the longest capsule. Every other capsule is
    zeroed and the result flattened to `(batch, num_caps * dim)`.

    Example:

    >>> poses = keras.random.normal((2, 10, 16))
    >>> keras_capsules.layers.Mask()([poses, keras.ops.eye(10)[:2]]).shape
    (2, 160)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017, section 4.1.
    """

    def build(self, input_shape):
        poses_shape, _ = split_capsule_inputs(input_shape)
        if len(poses_shape) != 3:
            raise ValueError(
                "Mask expects poses of shape (batch, num_caps, dim). "
                f"Received: poses.shape={tuple(poses_shape)}"
            )

    def call(self, inputs):
        poses, labels = split_capsule_inputs(inputs)
        if labels is not None:
            if len(labels.shape) == 1:
                labels = ops.one_hot(ops.cast(labels, "int32"), poses.shape[1])
        else:
            labels = ops.one_hot(ops.argmax(safe_norm(poses), axis=-1), poses.shape[1])
        masked = poses * ops.cast(labels, poses.dtype)[..., None]
        return ops.reshape(masked, (-1, poses.shape[1] * poses.shape[2]))

    def compute_output_shape(self, input_shape):
        poses_shape, _ = split_capsule_inputs(input_shape)
        batch, num_caps, dim = poses_shape
        return (batch, None if num_caps is None else num_caps * dim)

