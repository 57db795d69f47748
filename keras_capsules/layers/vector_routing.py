"""Heinsen's routing of vectors in sequences (2022): any number of input
vectors routed to a few output vectors in memory linear in their number,
because the votes are never materialised."""

import math

import keras
from keras import ops

from keras_capsules.deprecation import renamed
from keras_capsules.ops import compute_dtype_for, layer_norm
from keras_capsules.validation import boolean, built_input_spec, non_empty, positive_int

# The epsilon of the parameter-free layer normalisation of the outputs.
_NORM_EPSILON = 1e-5


@keras.saving.register_keras_serializable(package="keras_capsules")
class VectorRouting(keras.layers.Layer):
    """Routes a sequence of vectors to `num_capsules` vectors (Heinsen, 2022).

    Inputs `x` of shape `(batch, n, input_dim)` (hidden states of a
    transformer, tokens, points, capsules of any kind) are routed to
    `num_capsules` vectors of `capsule_dim`. With `j` the outputs, `i` the
    inputs, `s = x / sqrt(n)`, `W`/`B` learned:

    ```
    a_i   = s_i . w_a(i) + b_a(i)                    input activations
    V_ij  = (s_i * W_F1[j]) @ W_F2 + B_F2[j]           votes (never formed)
    R_ij  = 1 / num_capsules                            first iteration
    R_ij  = softmax_j(log_sigmoid((x_i . P_j) w_s(i, j) + b_s(i, j)))
            P_j = (N(out_j) @ W_G1) * W_G2[j] + B_G2[j]  later iterations
    D_use = sigmoid(a_i) R_ij,  D_ign = sigmoid(a_i) - D_use
    phi   = beta_use(i, j) D_use - beta_ign(i, j) D_ign   credit of i for j
    out_j = sum_i phi_ij V_ij
          = ((sum_i phi_ij s_i) * W_F1[j]) @ W_F2 + (sum_i phi_ij) B_F2[j]
    ```

    `N` is a layer normalisation without parameters (epsilon 1e-5); the
    outputs are normalised so too when `normalize=True`. The last line is
    why memory grows only linearly in `n`: the sum over the inputs is
    taken before the votes' matrix product, so no `(n, num_capsules,
    capsule_dim)` tensor is ever formed.

    With `num_inputs=None` any number of inputs is routed: the per-input
    parameters `w_a`, `b_a`, `w_s`, `b_s` are shared by every position,
    and `beta_use`, `beta_ign` are computed from each input by a dense
    layer. With `num_inputs=n` each of the `n` positions has its own
    parameters (the authors' `n_inp=n`).

    Masks: a Keras mask `(batch, n)` (from `Embedding(mask_zero=True)`, a
    keras-hub padding mask, `Masking`) or `mask=`, `True` = keep. Dropped
    inputs take no part (whatever they hold, NaN or Inf too), and the `n`
    that scales the inputs is each sequence's own count of kept inputs: a
    padded batch with its mask gives exactly the outputs of the unpadded
    sequences. A sequence with no kept input gives zeros, and so do
    inputs with no vectors at all (`n = 0`): routing nothing, as a fully
    padded batch. Inputs of no features (`input_dim = 0`) are refused.

    The routing runs in float32 under the `mixed_float16` and
    `mixed_bfloat16` policies (its sums over `n` inputs and its
    normalisations); the outputs have the layer's compute dtype.

    The weights are named after the authors' parameters (`W_A` is
    `activation_kernel`, ...): `keras_capsules.convert.vector_routing
    .load_authors_weights` reads their `EfficientVectorRouting` state dict.

    Args:
        num_capsules: int, the number of output vectors (capsules);
            formerly `num_outputs`.
        capsule_dim: int, their dimension; formerly `output_dim`.
        iterations: int >= 1, routing iterations; the first routes
            uniformly (default 2, the authors').
        num_inputs: `None` (any number, the default) or the fixed number of
            inputs, each with its own parameters.
        normalize: bool, layer-normalise the outputs (default `True`).
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: `(batch, n, input_dim)`.
        mask: optional booleans `(batch, n)`, `True` = keep; a Keras mask of
            the inputs is used when not given.
        return_coefficients: bool, also return `phi`, the credit assigned
            to each input for each output, `(batch, n, num_capsules)` (0 for
            dropped inputs).

    Returns:
        `(batch, num_capsules, capsule_dim)`, and with `return_coefficients`
        the pair `(outputs, phi)`.

    Example (a text classifier routing token embeddings of any length):

    >>> tokens = keras.Input((None,), dtype="int32")
    >>> x = keras.layers.Embedding(1000, 32, mask_zero=True)(tokens)
    >>> routed = keras_capsules.layers.VectorRouting(4, 16)(x)
    >>> routed.shape
    (None, 4, 16)

    Reference: Heinsen, "An Algorithm for Routing Vectors in Sequences",
    arXiv:2211.11754, 2022 (its `EfficientVectorRouting`).
    """

    def __init__(
        self, num_capsules=None, capsule_dim=None, iterations=2, num_inputs=None, normalize=True,
        **kwargs,
    ):  # fmt: skip
        num_capsules = renamed(kwargs, "num_outputs", "num_capsules", num_capsules, "VectorRouting")
        capsule_dim = renamed(kwargs, "output_dim", "capsule_dim", capsule_dim, "VectorRouting")
        super().__init__(**kwargs)
        self.num_capsules = positive_int(num_capsules, "num_capsules")
        self.capsule_dim = positive_int(capsule_dim, "capsule_dim")
        self.iterations = positive_int(iterations, "iterations")
        self.num_inputs = None if num_inputs is None else positive_int(num_inputs, "num_inputs")
        self.normalize = boolean(normalize, "normalize")
        self.input_spec = keras.layers.InputSpec(ndim=3)
        self.supports_masking = True

    def build(self, input_shape):
        length, dim = input_shape[1], input_shape[2]
        if dim is None:
            raise ValueError(
                "VectorRouting expects inputs of shape (batch, n, input_dim) with a known "
                f"input_dim. Received: input_shape={tuple(input_shape)}"
            )
        non_empty("VectorRouting", "inputs", input_shape, (2,), ("feature",))
        if self.num_inputs is not None and length is not None and length != self.num_inputs:
            raise ValueError(
                f"VectorRouting(num_inputs={self.num_inputs}) expects {self.num_inputs} inputs "
                f"per sequence. Received: input_shape={tuple(input_shape)}"
            )
        self.input_dim = dim
        self.input_spec = built_input_spec((None, self.num_inputs, dim), (1, -1))
        rows, n_out, d_out = self.num_inputs or 1, self.num_capsules, self.capsule_dim

        def normal(stddev):
            return keras.initializers.RandomNormal(stddev=stddev)

        def weight(name, shape, initializer):
            return self.add_weight(name=name, shape=shape, initializer=initializer)

        # The authors' initialisation (their names in brackets).
        self.activation_kernel = weight(
            "activation_kernel", (rows, dim), normal(2 / math.sqrt(dim))
        )  # W_A
        self.activation_bias = weight("activation_bias", (rows,), "zeros")  # B_A
        self.vote_scale = weight("vote_scale", (n_out, dim), normal(1.0))  # W_F1
        self.vote_kernel = weight("vote_kernel", (dim, d_out), normal(2 / math.sqrt(dim)))  # W_F2
        self.vote_bias = weight("vote_bias", (n_out, d_out), "zeros")  # B_F2
        self.prediction_kernel = weight(
            "prediction_kernel", (d_out, dim), normal(1 / math.sqrt(d_out))
        )  # W_G1
        self.prediction_scale = weight("prediction_scale", (n_out, dim), normal(1.0))  # W_G2
        self.prediction_bias = weight("prediction_bias", (n_out, dim), "zeros")  # B_G2
        self.agreement_scale = weight(
            "agreement_scale", (rows, n_out), normal(1 / math.sqrt(dim))
        )  # W_S
        self.agreement_bias = weight("agreement_bias", (rows, n_out), "zeros")  # B_S
        if self.num_inputs is None:
            # compute_beta_use / compute_beta_ign: torch Linear's default init.
            bound = 1 / math.sqrt(dim)
            uniform = keras.initializers.RandomUniform(-bound, bound)
            self.beta_use_kernel = weight("beta_use_kernel", (dim, n_out), uniform)
            self.beta_use_bias = weight("beta_use_bias", (n_out,), uniform)
            self.beta_ign_kernel = weight("beta_ign_kernel", (dim, n_out), uniform)
            self.beta_ign_bias = weight("beta_ign_bias", (n_out,), uniform)
        else:
            self.beta_use = weight("beta_use", (rows, n_out), normal(1.0))
            self.beta_ign = weight("beta_ign", (rows, n_out), normal(1.0))

    def call(self, inputs, mask=None, return_coefficients=False):
        dtype = compute_dtype_for(self.compute_dtype)

        def w(variable):
            return ops.cast(variable, dtype)

        x = ops.cast(inputs, dtype)
        if mask is None:
            keep = None
            count = ops.cast(ops.shape(x)[1], dtype)
        else:
            keep = ops.cast(mask, dtype)[:, :, None]  # (b, n, 1)
            # Whatever a dropped input holds (NaN or Inf too) stays out.
            x = ops.where(ops.cast(mask, "bool")[:, :, None], x, ops.zeros_like(x))
            count = ops.maximum(ops.sum(keep, axis=1, keepdims=True), 1.0)  # (b, 1, 1)
        scaled = x * ops.rsqrt(count)
        # Input activations; the shared parameters (one row) broadcast over n.
        a = ops.sum(scaled * w(self.activation_kernel), axis=-1) + w(self.activation_bias)
        present = ops.sigmoid(a)[:, :, None]  # (b, n, 1)
        if keep is not None:
            present = present * keep
        if self.num_inputs is None:
            beta_use = ops.matmul(x, w(self.beta_use_kernel)) + w(self.beta_use_bias)
            beta_ign = ops.matmul(x, w(self.beta_ign_kernel)) + w(self.beta_ign_bias)
        else:
            beta_use, beta_ign = w(self.beta_use), w(self.beta_ign)

        outputs, phi = None, None
        for iteration in range(self.iterations):
            if iteration == 0:
                shares = ops.full((1, 1, self.num_capsules), 1.0 / self.num_capsules, dtype=dtype)
            else:
                predicted = ops.matmul(self._norm(outputs), w(self.prediction_kernel))
                predicted = predicted * w(self.prediction_scale) + w(self.prediction_bias)
                agreement = ops.einsum("bnd,bjd->bnj", x, predicted)
                agreement = agreement * w(self.agreement_scale) + w(self.agreement_bias)
                shares = ops.softmax(ops.log_sigmoid(agreement), axis=-1)
            use = present * shares
            phi = beta_use * use - beta_ign * (present - use)  # (b, n, j)
            # sum_i phi_ij V_ij without the votes: (b, j, d) before (d, h).
            pooled = ops.einsum("bnj,bnd->bjd", phi, scaled) * w(self.vote_scale)
            outputs = ops.matmul(pooled, w(self.vote_kernel))
            outputs = outputs + ops.sum(phi, axis=1)[:, :, None] * w(self.vote_bias)
        if self.normalize:
            outputs = self._norm(outputs)
        outputs = ops.cast(outputs, self.compute_dtype)
        if return_coefficients:
            return outputs, ops.cast(phi, self.compute_dtype)
        return outputs

    def _norm(self, x):
        """`ops.layer_norm` over the last axis (the identity for 1-D
        outputs, as the authors')."""
        return x if self.capsule_dim == 1 else layer_norm(x, _NORM_EPSILON)

    def compute_mask(self, inputs, mask=None):
        return None  # the outputs are a fixed number of vectors

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.num_capsules, self.capsule_dim)

    def compute_output_spec(self, inputs, mask=None, return_coefficients=False):
        shape = tuple(inputs.shape)
        outputs = keras.KerasTensor(self.compute_output_shape(shape), dtype=self.compute_dtype)
        if not return_coefficients:
            return outputs
        phi = keras.KerasTensor((shape[0], shape[1], self.num_capsules), dtype=self.compute_dtype)
        return outputs, phi

    def get_config(self):
        config = super().get_config()
        config.update(
            num_capsules=self.num_capsules,
            capsule_dim=self.capsule_dim,
            iterations=self.iterations,
            num_inputs=self.num_inputs,
            normalize=self.normalize,
        )
        return config
