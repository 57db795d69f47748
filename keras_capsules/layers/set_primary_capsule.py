"""Primary capsules of sets and token sequences: each element's features
made into capsules by one shared affine map."""

import keras
from keras import ops

from keras_capsules.initializers import primary_bias_initializer, primary_kernel_initializer
from keras_capsules.ops import squash
from keras_capsules.validation import boolean, built_input_spec, non_empty, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class SetPrimaryCapsule(keras.layers.Layer):
    """Primary capsules of sets, point clouds and token sequences.

    Each element `x[b, n]` of `(batch, elements, features)` inputs (a point,
    a token, a set member) gives `num_capsules` capsules through one affine
    map shared by all elements, then squashed:

    ```
    y[b, n, k, :] = x[b, n, :] @ W[:, k, :] + bias[k, :]
    capsules = squash(reshape(y, (batch, elements * num_capsules, capsule_dim)))
    ```

    The capsules of element `n` are rows `n * num_capsules ... (n + 1) *
    num_capsules - 1`; permuting the elements permutes the capsules the
    same way (no position is encoded), and any number of elements works
    (`elements` may be `None`). Empty sets (`elements = 0`) give no
    capsules, `(batch, 0, capsule_dim)`, as a fully masked set gives only
    dropped ones; elements of no features are refused.

    Masks: a Keras mask `(batch, elements)` (from `Embedding(mask_zero=True)`,
    `Masking`, or `mask=`), `True` = keep, sets the capsules of dropped
    elements to 0 (whatever they hold, NaN or Inf too) and is passed on as
    `(batch, elements * num_capsules)`, so that `Capsule` routes only the
    kept children: a padded batch gives the outputs of the unpadded sets.

    Initialisation: `PrimaryCapsule`'s (`keras_capsules.initializers`), a
    kernel of variance `1 / (capsule_dim * features)` and a bias of standard
    deviation `1 / sqrt(capsule_dim)`, so capsules start near the squash's
    knee (length ~0.5) whatever the scale of the features. The bias is the
    same for every element: such capsules share a direction, and
    `Capsule(share_weights=True)` derives its default transforms for
    children like these (see `Router.vote_stddev`).

    Args:
        num_capsules: int, capsules per element.
        capsule_dim: int, dimension of each capsule.
        squash: bool, apply `keras_capsules.ops.squash` to the capsules.
        kernel_initializer, bias_initializer: `None` (the default) derives
            them (see "Initialisation"); any Keras initializer otherwise.
        kernel_regularizer, bias_regularizer, kernel_constraint,
            bias_constraint: as in `keras.layers.Dense`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, elements, features)`.
        mask: optional booleans `(batch, elements)`, `True` = keep; a Keras
            mask of the inputs is used when not given.

    Returns:
        Capsules of shape `(batch, elements * num_capsules, capsule_dim)`.

    Example (tokens of a text model, two capsules of 8-D per token):

    >>> tokens = keras.Input((None,), dtype="int32")
    >>> x = keras.layers.Embedding(1000, 32, mask_zero=True)(tokens)
    >>> capsules = keras_capsules.layers.SetPrimaryCapsule(2, 8)(x)
    >>> capsules.shape
    (None, None, 8)
    >>> keras_capsules.layers.Capsule(4, 16, share_weights=True)(capsules).shape
    (None, 4, 16)

    Reference: Sabour, Frosst & Hinton, "Dynamic Routing Between Capsules",
    NeurIPS 2017 (primary capsules); per element as the primary point
    capsules of Zhao et al., "3D Point Capsule Networks", CVPR 2019.
    """

    def __init__(
        self,
        num_capsules,
        capsule_dim,
        squash=True,
        kernel_initializer=None,
        bias_initializer=None,
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_capsules = positive_int(num_capsules, "num_capsules")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.squash = boolean(squash, "squash")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.input_spec = keras.layers.InputSpec(ndim=3)
        self.supports_masking = True

    def build(self, input_shape):
        if input_shape[-1] is None:
            raise ValueError(
                "SetPrimaryCapsule expects inputs of shape (batch, elements, features) "
                f"with known features. Received: input_shape={tuple(input_shape)}"
            )
        non_empty("SetPrimaryCapsule", "inputs", input_shape, (-1,), ("feature",))
        self.input_spec = built_input_spec(input_shape, (-1,))
        dim = self.capsule_dim
        self.kernel = self.add_weight(
            name="kernel",
            shape=(input_shape[-1], self.num_capsules, dim),
            initializer=self.kernel_initializer or primary_kernel_initializer(dim),
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
        )
        self.bias = self.add_weight(
            name="bias",
            shape=(self.num_capsules, dim),
            initializer=self.bias_initializer or primary_bias_initializer(dim),
            regularizer=self.bias_regularizer,
            constraint=self.bias_constraint,
        )

    def call(self, inputs, mask=None):
        y = ops.einsum("bnf,fkd->bnkd", inputs, self.kernel) + self.bias
        capsules = squash(y) if self.squash else y
        if mask is not None:
            # Zeros, whatever a dropped element holds (NaN or Inf too).
            keep = ops.cast(mask, "bool")[:, :, None, None]
            capsules = ops.where(keep, capsules, ops.zeros_like(capsules))
        batch = ops.shape(inputs)[0]
        return ops.reshape(capsules, (batch, -1, self.capsule_dim))

    def compute_mask(self, inputs, mask=None):
        if mask is None:
            return None
        return ops.repeat(mask, self.num_capsules, axis=1)

    def compute_output_shape(self, input_shape):
        n = input_shape[1]
        return (input_shape[0], None if n is None else n * self.num_capsules, self.capsule_dim)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_capsules=self.num_capsules,
            capsule_dim=self.capsule_dim,
            squash=self.squash,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            bias_initializer=keras.initializers.serialize(self.bias_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            bias_regularizer=keras.regularizers.serialize(self.bias_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
            bias_constraint=keras.constraints.serialize(self.bias_constraint),
        )
        return config
