"""Cross-attention routing: learned parent queries attend to the children's
votes, as the query tokens of a transformer decoder attend to its inputs."""

import keras
from keras import ops

from keras_capsules.ops import safe_norm, squash
from keras_capsules.routing.base import Router
from keras_capsules.routing.registry import register
from keras_capsules.validation import positive_int

# Child activations enter the attention as log-weights: `log(max(a, tiny))`,
# so a child of activation 0 (a masked one) weighs exp(-69) ~ 1e-30.
_TINY = 1e-30


@keras.saving.register_keras_serializable(package="keras_capsules")
@register("cross_attention")
class CrossAttentionRouting(Router):
    """Non-iterative routing by multi-head cross-attention.

    Each parent `j` has a learned query `q[j]` of the votes' dimension,
    split into `num_heads` heads of `head_dim = dim / num_heads`; in each
    head it attends over the children's votes for it, which are both keys
    and values:

    ```
    logits[b, h, i, j] = q[j, h] . u[b, i, j, h] / sqrt(head_dim) + log a[b, i]
    C[b, h, :, j] = softmax over the children i of logits[b, h, :, j]
    s[b, j, h] = sum_i C[b, h, i, j] u[b, i, j, h]
    poses = squash(concat_h s[b, j, h]); activations = safe_norm(poses)
    ```

    `u[b, i, j, h]` is head `h`'s slice of the vote of child `i` for parent
    `j`; `a` are the children's activations (probabilities; all 1 when not
    given, 0 for the children a Keras mask drops, which then take no part).
    The softmax runs over the children, so a parent is a weighted mean of
    its votes, whatever their number: the router routes sets of any size.
    The coefficients returned are `C` averaged over the heads, `(batch,
    in_caps, out_caps)`; each parent's column sums to 1.

    The queries start near 0 (truncated normal, standard deviation 0.02, as
    a transformer's learned query tokens), so each parent starts as the
    mean of its votes, and the capsule layers draw the votes so that it
    starts at length ~0.7 (`vote_stddev`).

    Args:
        num_heads: int, attention heads; must divide the votes' `dim`.
        query_initializer: initializer of the queries `(out_caps, dim)`.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        votes: `u`, `(batch, in_caps, out_caps, dim)`.
        activations: optional `(batch, in_caps)`, the children's weights.
        return_coefficients: also return `C` averaged over the heads.

    Returns:
        `(poses (batch, out_caps, dim), lengths (batch, out_caps))`; then
        `C` `(batch, in_caps, out_caps)` with `return_coefficients=True`.

    Example (class capsules of tokens, routed by 4 heads):

    >>> tokens = keras.random.normal((2, 20, 8))
    >>> layer = keras_capsules.layers.Capsule(
    ...     3, 16, share_weights=True, router=keras_capsules.routing.CrossAttentionRouting(4))
    >>> tuple(layer(tokens).shape)
    (2, 3, 16)

    Reference: Vaswani et al., "Attention Is All You Need", NeurIPS 2017
    (multi-head attention); routing as cross-attention from learned parent
    queries, as in the capsule transformers of the Capsformer family.
    """

    weight_axes = (2, 3)

    def __init__(self, num_heads=1, query_initializer=None, **kwargs):
        super().__init__(**kwargs)
        self.num_heads = positive_int(num_heads, "num_heads")
        self.query_initializer = keras.initializers.get(
            query_initializer or keras.initializers.TruncatedNormal(stddev=0.02)
        )

    def check_inputs(self, votes_shape, activations_shape=None):
        super().check_inputs(votes_shape, activations_shape)
        dim = votes_shape[3]
        if dim is None or dim % self.num_heads:
            raise ValueError(
                "`num_heads` must divide the votes' dimension (known). Received: "
                f"num_heads={self.num_heads} with votes.shape={tuple(votes_shape)}"
            )
        if votes_shape[2] is None:
            raise ValueError(
                "CrossAttentionRouting has a query per parent: out_caps must be known. "
                f"Received: votes.shape={tuple(votes_shape)}"
            )

    def build(self, votes_shape, activations_shape=None):
        super().build(votes_shape, activations_shape)
        self.queries = self.add_weight(
            name="queries",
            shape=(votes_shape[2], votes_shape[3]),
            initializer=self.query_initializer,
        )

    coherent_children_exponent = 0.0  # parents average their votes

    def vote_stddev(self, children, parents, dim, coherent=False):
        """`1.5 * sqrt(children / dim)` (see `Router.vote_stddev`).

        A parent starts as the mean of its votes (the queries start near
        0): of `children` votes of random directions, of length `|vote| /
        sqrt(children)`; votes of this standard deviation start it at
        length ~1.5 before the squash, ~0.7 after. The parents do not
        compete for the children (the softmax is over the children), so
        the margin loss has only each parent's own length to move: from the
        squash's knee (0.5) the composition of `tests/test_learning.py`
        lost 45 % of its loss in 200 steps, from ~0.7 64 % (tokens: 50 %
        and 75 %). Coherent votes (all alike) average to one of them:
        `1.5 / sqrt(dim)`. Unknown `children`: votes of unit variance.
        """
        if coherent:
            return 1.5 / dim**0.5
        return 1.0 if children is None else 1.5 * (children / dim) ** 0.5

    def route(self, votes, activations):
        batch, children, parents, dim = ops.shape(votes)
        heads = self.num_heads
        head_dim = votes.shape[3] // heads
        u = ops.reshape(votes, (batch, children, parents, heads, head_dim))
        queries = ops.reshape(ops.cast(self.queries, votes.dtype), (parents, heads, head_dim))
        logits = ops.einsum("bijhd,jhd->bijh", u, queries) / head_dim**0.5
        if activations is not None:
            weights = ops.log(ops.maximum(activations, _TINY))
            logits = logits + weights[:, :, None, None]
        coefficients = ops.softmax(logits, axis=1)  # over the children
        s = ops.einsum("bijh,bijhd->bjhd", coefficients, u)
        poses = squash(ops.reshape(s, (batch, parents, dim)))
        return poses, safe_norm(poses), ops.mean(coefficients, axis=-1)

    def get_config(self):
        config = super().get_config()
        config.update(
            num_heads=self.num_heads,
            query_initializer=keras.initializers.serialize(self.query_initializer),
        )
        return config
