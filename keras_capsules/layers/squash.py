"""The squash as a layer, so that models using it save and load with
`safe_mode=True` (a `Lambda` of `keras_capsules.ops.squash` cannot)."""

import keras

from keras_capsules.ops import efficient_squash, squash
from keras_capsules.validation import is_int, one_of, positive_float

VARIANTS = {"sabour": squash, "efficient": efficient_squash}


@keras.saving.register_keras_serializable(package="keras_capsules")
class Squash(keras.layers.Layer):
    """Squashes capsules to lengths in [0, 1), keeping their directions.

    With `n = sqrt(sum(x^2, axis) + epsilon)`:

    ```
    "sabour":    squash(x) = n^2 / (1 + n^2) * x / n      # Sabour et al., eq. 1
    "efficient": squash(x) = (1 - exp(-n)) * x / n        # Mazzia et al., eq. 5
    ```

    The efficient squash is steeper near 0 (length `n` for small `n`, where
    Sabour's gives `n^2`), so capsules of small inputs pass back more
    gradient. Both are computed in float32 under float16/bfloat16 policies
    and have finite gradients at `x = 0`. The layer passes a Keras mask
    through unchanged.

    Args:
        variant: `"sabour"` (default) or `"efficient"`.
        axis: int, the capsule dimension (default -1).
        epsilon: float `> 0`, added under the square root of the norm.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: capsules, e.g. `(batch, capsules, dim)`.

    Returns:
        the squashed capsules, the shape of `inputs`.

    Example (tokens made into one capsule each, squashed):

    >>> tokens = keras.Input((64, 32))
    >>> capsules = keras.layers.Dense(16)(tokens)
    >>> keras_capsules.layers.Squash()(capsules).shape
    (None, 64, 16)
    >>> y = keras_capsules.layers.Squash()(np.ones((1, 1, 4), "float32"))
    >>> ops.convert_to_numpy(y).round(3)   # length 2 -> 0.8
    array([[[0.4, 0.4, 0.4, 0.4]]], dtype=float32)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017; Mazzia, Salvetti & Chiaberge, "Efficient-CapsNet: capsule
    network with self-attention routing", Scientific Reports 2021.
    """

    def __init__(self, variant="sabour", axis=-1, epsilon=1e-7, **kwargs):
        super().__init__(**kwargs)
        self.variant = one_of(variant, tuple(VARIANTS), "variant")
        if not is_int(axis):
            raise ValueError(f"`axis` must be an int. Received: axis={axis!r}")
        self.axis = int(axis)
        # epsilon = 0 makes the gradient at a zero capsule 0 / 0.
        self.epsilon = positive_float(epsilon, "epsilon")
        self.supports_masking = True

    def build(self, input_shape):
        rank = len(input_shape)
        if not -rank <= self.axis < rank or self.axis in (0, -rank):
            raise ValueError(
                "Squash needs an axis of the capsules that is not the batch axis. "
                f"Received: axis={self.axis} for input_shape={tuple(input_shape)}"
            )
        # Any shape later (the layer has no weights) with the axis and a
        # batch axis before it; fewer axes are refused when called.
        self.input_spec = keras.layers.InputSpec(
            min_ndim=self.axis + 1 if self.axis > 0 else 1 - self.axis
        )

    def call(self, inputs):
        return VARIANTS[self.variant](inputs, axis=self.axis, epsilon=self.epsilon)

    def compute_output_shape(self, input_shape):
        return tuple(input_shape)

    def get_config(self):
        config = super().get_config()
        config.update(variant=self.variant, axis=self.axis, epsilon=self.epsilon)
        return config
