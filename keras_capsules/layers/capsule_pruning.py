"""Pruning of redundant capsules (OrthCaps)."""

import keras
from keras import ops

from keras_capsules.ops import compute_dtype_for, safe_norm
from keras_capsules.validation import finite_float


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsulePruning(keras.layers.Layer):
    """Zeroes capsules that nearly repeat an earlier capsule.

    For capsules `x[b, i, :]`, `(batch, n, dim) -> (batch, n, dim)`:

    ```
    cos[b, i, j] = x_i . x_j / (safe_norm(x_i) * safe_norm(x_j))
    pruned[b, i] = any_{j < i} cos[b, i, j] > threshold
    outputs[b, i] = 0 if pruned[b, i] else x[b, i]
    ```

    A capsule is compared with every earlier capsule, pruned or not, so all
    decisions are one masked `(n x n)` comparison (vectorised). The shape is
    kept (pruned capsules are zero rather than removed) so the layer
    compiles; surviving capsules pass unchanged, with identity gradients.
    OrthCaps prunes with a fixed cosine threshold in the same way.

    Args:
        threshold: float, cosine similarity above which a capsule is
            pruned, `-1 <= threshold <= 1`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: capsules `x` of shape `(batch, n, dim)`.

    Returns:
        Capsules of shape `(batch, n, dim)`, the pruned ones zero.

    Example (the third capsule repeats the first, scaled):

    >>> x = np.array([[[1.0, 0.0], [0.0, 1.0], [2.0, 0.0]]], "float32")
    >>> ops.convert_to_numpy(keras_capsules.layers.CapsulePruning(0.95)(x))
    array([[[1., 0.],
            [0., 1.],
            [0., 0.]]], dtype=float32)

    Reference: Geng, Wang, Zhao, Ma & Yang, "OrthCaps: An Orthogonal CapsNet
    with Sparse Attention Routing and Pruning", CVPR 2024.
    """

    def __init__(self, threshold=0.95, **kwargs):
        super().__init__(**kwargs)
        self.threshold = finite_float(threshold, "threshold", -1.0, 1.0, low_inclusive=True)

    def build(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                "CapsulePruning expects capsules of shape (batch, n, dim). "
                f"Received: input_shape={tuple(input_shape)}"
            )
        # Any (batch, n, dim) later (the layer has no weights); other ranks
        # are refused when called.
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def call(self, inputs):
        x = ops.cast(inputs, compute_dtype_for(inputs.dtype))
        unit = x / safe_norm(x, keepdims=True)
        cosine = ops.stop_gradient(ops.einsum("bid,bjd->bij", unit, unit))
        n = ops.shape(x)[1]
        positions = ops.arange(n)
        earlier = positions[None, :] < positions[:, None]  # [i, j]: j < i
        pruned = ops.any(ops.logical_and(cosine > self.threshold, earlier), axis=-1)
        keep = ops.cast(ops.logical_not(pruned), inputs.dtype)
        return inputs * keep[..., None]

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(threshold=self.threshold)
        return config
