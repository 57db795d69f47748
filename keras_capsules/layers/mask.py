"""Masking capsules by label, for the reconstruction decoder."""

import keras
from keras import ops

from keras_capsules.labels import one_hot
from keras_capsules.layers.base_routed_capsule import split_capsule_inputs
from keras_capsules.ops import safe_norm


@keras.saving.register_keras_serializable(package="keras_capsules")
class Mask(keras.layers.Layer):
    """Keeps one capsule per example and flattens, as the decoder expects.

    `Mask()([poses, labels])` keeps the capsule of the true class;
    `Mask()(poses)` keeps the longest capsule. Every other capsule is
    zeroed and the result flattened:

    ```
    outputs[b] = flatten(poses[b] * one_hot(label[b], num_caps)[:, None])
    ```

    Args:
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: poses of shape `(batch, num_caps, dim)`, or `[poses,
            labels]` with labels as integer class ids of shape `(batch,)` or
            `(batch, 1)` (Keras's sparse-label shape), or one-hot of shape
            `(batch, num_caps)`. With `num_caps == 1` a `(batch, 1)` label
            is read as one-hot. Any other shape is a `ValueError`.

    Returns:
        The masked poses, flattened: shape `(batch, num_caps * dim)`.

    Example:

    >>> poses = np.arange(12, dtype="float32").reshape(2, 3, 2)
    >>> ops.convert_to_numpy(keras_capsules.layers.Mask()([poses, np.array([2, 0])]))
    array([[0., 0., 0., 0., 4., 5.],
           [6., 7., 0., 0., 0., 0.]], dtype=float32)
    >>> ops.convert_to_numpy(keras_capsules.layers.Mask()(poses))   # the longest
    array([[ 0.,  0.,  0.,  0.,  4.,  5.],
           [ 0.,  0.,  0.,  0., 10., 11.]], dtype=float32)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017, section 4.1.
    """

    def build(self, input_shape):
        check_mask_inputs(*split_capsule_inputs(input_shape))

    def call(self, inputs):
        poses, labels = split_capsule_inputs(inputs)
        # Shapes again: a built layer may be called with other labels.
        check_mask_inputs(poses.shape, None if labels is None else labels.shape)
        num_caps = poses.shape[1]
        if labels is None:
            labels = ops.one_hot(ops.argmax(safe_norm(poses), axis=-1), num_caps)
        elif len(labels.shape) == 1 or labels.shape[-1] != num_caps:
            labels = one_hot(labels, num_caps, "labels")
        masked = poses * ops.cast(labels, poses.dtype)[..., None]
        return ops.reshape(masked, (-1, num_caps * poses.shape[2]))

    def compute_output_shape(self, input_shape):
        poses_shape, _ = split_capsule_inputs(input_shape)
        batch, num_caps, dim = poses_shape
        return (batch, None if num_caps is None else num_caps * dim)


def check_mask_inputs(poses_shape, labels_shape):
    """Raises unless poses are `(batch, num_caps, dim)` (both known) and
    labels `(batch,)`, `(batch, 1)` or `(batch, num_caps)`."""
    poses_shape = tuple(poses_shape)
    if len(poses_shape) != 3 or poses_shape[1] is None or poses_shape[2] is None:
        raise ValueError(
            "Mask expects poses of shape (batch, num_caps, dim) with known num_caps "
            f"and dim. Received: poses.shape={poses_shape}"
        )
    if labels_shape is None:
        return
    labels_shape = tuple(labels_shape)
    batch, num_caps = poses_shape[:2]
    width_ok = len(labels_shape) == 1 or (
        len(labels_shape) == 2 and labels_shape[1] in (1, num_caps)
    )
    if not width_ok or None not in (batch, labels_shape[0]) and labels_shape[0] != batch:
        raise ValueError(
            f"Mask expects labels of shape (batch,) or (batch, 1) (class ids) or "
            f"(batch, {num_caps}) (one-hot) for poses.shape={poses_shape}. "
            f"Received: labels.shape={labels_shape}"
        )
