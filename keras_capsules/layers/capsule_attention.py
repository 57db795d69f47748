"""Multi-head self-attention among the capsules of one layer."""

import keras
from keras import ops

from keras_capsules.ops import compute_dtype_for, masked_softmax, squash, top_k_softmax
from keras_capsules.validation import boolean, built_input_spec, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
class CapsuleAttention(keras.layers.Layer):
    """Scaled dot-product self-attention among the capsules of one layer.

    Queries and keys are learned projections `dim -> dim` (no bias); the
    values are the capsules themselves. All three are split into
    `num_heads` heads of `dim // num_heads`:

    ```
    q = x @ W_q, k = x @ W_k, v = x                 # split into heads
    logits[b, h, i, j] = q[b, h, i] . k[b, h, j] / sqrt(dim // num_heads)
    scores = softmax(logits, axis=keys)              # over the kept keys only
    outputs[b, i] = concat_h sum_j scores[b, h, i, j] v[b, h, j]
    ```

    With `window_size`, query `i` only sees keys `j` with `|i - j| <=
    window_size // 2` (local windowed attention); with `top_k`, only its
    `top_k` largest logits among those (ties with the `top_k`-th are all
    kept); other scores are exactly 0. Both are masks, no loops. With
    `squash_output=True` the outputs are squashed. The attention runs in
    float32 under half-precision policies, with `W_q` and `W_k` kept and
    read in float32.

    Args:
        num_heads: int, number of heads; must divide `dim`.
        top_k: int, keys kept per query, or `None` for all (must not
            exceed `n`).
        window_size: int, width of the local window, or `None` for global
            attention.
        squash_output: bool, apply `keras_capsules.ops.squash` to the
            outputs.
        kernel_initializer: initializer of the query and key kernels `W_q`
            and `W_k`.
        kernel_regularizer: regularizer of `W_q` and `W_k`, or `None`.
        kernel_constraint: constraint on `W_q` and `W_k`, or `None`.
        **kwargs: base layer arguments (`name`, `dtype`, ...).

    Call arguments:
        inputs: capsules `x` of shape `(batch, n, dim)`.
        return_attention_scores: bool, also return the scores.

    Returns:
        Capsules of shape `(batch, n, dim)`; with
        `return_attention_scores=True`, `(outputs, scores)` with scores of
        shape `(batch, num_heads, n, n)`.

    Example (each query keeps its 2 best keys):

    >>> x = np.linspace(-1, 1, 32, dtype="float32").reshape(1, 4, 8)
    >>> layer = keras_capsules.layers.CapsuleAttention(num_heads=2, top_k=2)
    >>> outputs, scores = layer(x, return_attention_scores=True)
    >>> tuple(outputs.shape), tuple(scores.shape)
    ((1, 4, 8), (1, 2, 4, 4))
    >>> (ops.convert_to_numpy(scores) > 0).sum(axis=-1)
    array([[[2, 2, 2, 2],
            [2, 2, 2, 2]]])

    Reference: Vaswani et al., "Attention Is All You Need", NeurIPS 2017;
    capsule self-attention as in Geng et al., "OrthCaps: An Orthogonal
    CapsNet with Sparse Attention Routing and Pruning", CVPR 2024.
    """

    def __init__(
        self,
        num_heads=4,
        top_k=None,
        window_size=None,
        squash_output=False,
        kernel_initializer="glorot_uniform",
        kernel_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = positive_int(num_heads, "num_heads")
        self.top_k = None if top_k is None else positive_int(top_k, "top_k")
        self.window_size = None if window_size is None else positive_int(window_size, "window_size")
        self.squash_output = boolean(squash_output, "squash_output")
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)

    def build(self, input_shape):
        if len(input_shape) != 3 or input_shape[-1] is None:
            raise ValueError(
                "CapsuleAttention expects capsules of shape (batch, n, dim) with a "
                f"known dim. Received: input_shape={tuple(input_shape)}"
            )
        n, dim = input_shape[1], input_shape[2]
        if dim % self.num_heads:
            raise ValueError(
                f"`num_heads` must divide the capsule dim {dim}. "
                f"Received: num_heads={self.num_heads}"
            )
        if self.top_k is not None and n is not None and self.top_k > n:
            raise ValueError(
                f"`top_k` must be at most the number of capsules {n}. Received: top_k={self.top_k}"
            )
        # A built layer refuses another dim (and rank) when called; n may change.
        self.input_spec = built_input_spec(input_shape, (-1,))
        # Not autocast: the attention runs in float32 (`call`), so the
        # kernels are read in float32, not rounded to float16 first.
        for name in ("query_kernel", "key_kernel"):
            setattr(
                self,
                name,
                self.add_weight(
                    name=name,
                    shape=(dim, dim),
                    autocast=False,
                    initializer=self.kernel_initializer,
                    regularizer=self.kernel_regularizer,
                    constraint=self.kernel_constraint,
                ),
            )

    def call(self, inputs, return_attention_scores=False):
        dtype = compute_dtype_for(self.compute_dtype)
        x = ops.cast(inputs, dtype)
        n, dim = x.shape[1], x.shape[2]
        head_dim = dim // self.num_heads
        q = self._split_heads(ops.matmul(x, ops.cast(self.query_kernel, dtype)))
        k = self._split_heads(ops.matmul(x, ops.cast(self.key_kernel, dtype)))
        v = self._split_heads(x)
        logits = ops.einsum("bhid,bhjd->bhij", q, k) / head_dim**0.5
        mask = self._window_mask(ops.shape(x)[1]) if self.window_size is not None else None
        if self.top_k is not None:
            scores = top_k_softmax(logits, min(self.top_k, n) if n else self.top_k, mask)
        elif mask is not None:
            scores = masked_softmax(logits, mask)
        else:
            scores = ops.softmax(logits, axis=-1)
        out = ops.einsum("bhij,bhjd->bihd", scores, v)
        out = ops.reshape(out, (ops.shape(x)[0], -1, dim))
        if self.squash_output:
            out = squash(out)
        out = ops.cast(out, self.compute_dtype)
        if return_attention_scores:
            return out, ops.cast(scores, self.compute_dtype)
        return out

    def _split_heads(self, t):
        """(batch, n, dim) -> (batch, heads, n, dim // heads)."""
        shape = ops.shape(t)
        t = ops.reshape(t, (shape[0], -1, self.num_heads, t.shape[-1] // self.num_heads))
        return ops.transpose(t, (0, 2, 1, 3))

    def _window_mask(self, n):
        positions = ops.arange(n)
        distance = ops.abs(positions[:, None] - positions[None, :])
        return distance <= self.window_size // 2

    def compute_output_shape(self, input_shape, return_attention_scores=False):
        if return_attention_scores:
            batch, n, _ = input_shape
            return tuple(input_shape), (batch, self.num_heads, n, n)
        return tuple(input_shape)

    def compute_output_spec(self, inputs, return_attention_scores=False):
        shapes = self.compute_output_shape(inputs.shape, return_attention_scores)
        if return_attention_scores:
            return tuple(keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes)
        return keras.KerasTensor(shapes, dtype=self.compute_dtype)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            top_k=self.top_k,
            window_size=self.window_size,
            squash_output=self.squash_output,
            kernel_initializer=keras.initializers.serialize(self.kernel_initializer),
            kernel_regularizer=keras.regularizers.serialize(self.kernel_regularizer),
            kernel_constraint=keras.constraints.serialize(self.kernel_constraint),
        )
        return config
