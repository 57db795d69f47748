"""Primary capsules of sequences: one convolution over time, regrouped
into capsules."""

import keras
from keras import ops

from keras_capsules.layers.primary_capsule import PrimaryCapsule
from keras_capsules.validation import built_input_spec, check_kernel_fits, int_tuple, non_empty


@keras.saving.register_keras_serializable(package="keras_capsules")
class PrimaryCapsule1D(PrimaryCapsule):
    """Convolutional primary capsules of sequences `(batch, steps, channels)`.

    `PrimaryCapsule` over time: one 1-D convolution with `num_capsules *
    capsule_dim` filters, its output `(batch, steps', num_capsules *
    capsule_dim)` regrouped into `(batch, steps' * num_capsules,
    capsule_dim)` capsules (the capsule type is the fastest-varying axis
    after the step) and squashed:

    ```
    y = conv1d(x, kernel, strides, padding) + bias
    capsules = squash(reshape(y, (batch, steps' * num_capsules, capsule_dim)))
    ```

    The convolution runs as a 2-D one of height 1, so it has the forms and
    the `implementation` rule of `PrimaryCapsule` (a strided convolution's
    input gradient is slow under XLA on CPUs; `"auto"` avoids it). The
    default initializers are `PrimaryCapsule`'s: capsules start near the
    squash's knee (length ~0.5) whatever the scale of the inputs. Keras
    masks are not propagated (a convolution mixes padded steps into its
    neighbours, as in `keras.layers.Conv1D`): crop or bucket sequences by
    length, or use `SetPrimaryCapsule`, which honours masks.

    Args:
        num_capsules: int, capsule types per step.
        capsule_dim: int, dimension of each capsule.
        kernel_size: int, the convolution's width in steps.
        strides: int, its stride.
        padding: `"valid"` or `"same"`.
        squash: bool, apply `keras_capsules.ops.squash` to the capsules.
        implementation: `"conv"`, `"matmul"`, `"hybrid"`,
            `"space_to_depth"` or `"auto"` (the same numbers; see
            `keras_capsules.conv.resolve_implementation`); a speed option,
            not saved in the config.
        kernel_initializer, bias_initializer: `None` (the default) derives
            them as in `PrimaryCapsule` (`keras_capsules.initializers`).
        kernel_regularizer, bias_regularizer, kernel_constraint,
            bias_constraint: as in `keras.layers.Conv1D`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: sequences `x` of shape `(batch, steps, channels)`.

    Returns:
        Capsules of shape `(batch, steps' * num_capsules, capsule_dim)`,
        `steps'` as for `keras.layers.Conv1D`.

    Example (8 capsule types of 8-D per step of a 100-step sequence):

    >>> x = keras.Input((100, 32))
    >>> keras_capsules.layers.PrimaryCapsule1D(8, 8, kernel_size=5, strides=2)(x).shape
    (None, 384, 8)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (primary capsules); over time as in Zhao et al.,
    "Investigating Capsule Networks with Dynamic Routing for Text
    Classification", EMNLP 2018.
    """

    def __init__(self, num_capsules, capsule_dim, kernel_size, strides=1, **kwargs):
        # A 2-D convolution of height 1 (the base's forms); the config keeps
        # the 1-D sizes a user gave.
        kernel_size = int_tuple(kernel_size, 1, "kernel_size")[0]
        strides = int_tuple(strides, 1, "strides")[0]
        super().__init__(
            num_capsules, capsule_dim, (1, kernel_size), strides=(1, strides), **kwargs
        )
        self.input_spec = keras.layers.InputSpec(ndim=3)

    def build(self, input_shape):
        if input_shape[-1] is None:
            raise ValueError(
                "PrimaryCapsule1D expects sequences of shape (batch, steps, channels) "
                f"with known channels. Received: input_shape={tuple(input_shape)}"
            )
        non_empty("PrimaryCapsule1D", "inputs", input_shape, (-1,), ("channel",))
        self._output_steps(input_shape)
        super().build((input_shape[0], 1, *input_shape[1:]))
        # The base's spec is for its (batch, 1, steps, channels) form.
        self.input_spec = built_input_spec(input_shape, (-1,))

    def _output_steps(self, input_shape):
        return check_kernel_fits(
            "PrimaryCapsule1D",
            "sequence",
            input_shape[1:2],
            self.kernel_size[1:],
            self.strides[1:],
            self.padding,
        )[0]

    def call(self, inputs):
        return super().call(ops.expand_dims(inputs, 1))

    def compute_output_shape(self, input_shape):
        steps = self._output_steps(input_shape)
        n = None if steps is None else steps * self.num_capsules
        return (input_shape[0], n, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(kernel_size=self.kernel_size[1], strides=self.strides[1])
        return config
