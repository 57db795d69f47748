"""Sparse attention routing of OrthCaps (Geng et al., 2024)."""

import keras
from keras import ops

from keras_capsules.ops import safe_norm, sparsemax, squash, top_k_softmax
from keras_capsules.routing.base import Router
from keras_capsules.routing.parent_major import agreement, parent_major, swap_caps, weighted_sum
from keras_capsules.routing.registry import register
from keras_capsules.validation import positive_float, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
@register("sparse_attention")
class SparseAttentionRouting(Router):
    """Non-iterative attention routing with sparse coupling coefficients.

    With votes `u[b, i, j, :]` (`dim` = pose size):

    ```
    consensus[b, j] = sum_i u[b, i, j]
    A[b, i, j] = u[b, i, j] . consensus[b, j] / sqrt(dim)
    C = sparsemax(A / temperature, axis=out_caps)          # top_k is None
    C = softmax over the top_k largest of A / temperature   # others exactly 0
    poses = squash(sum_i C[b, i, j] * u[b, i, j]); activations = safe_norm(poses)
    ```

    Sparsemax lets each child send its vote to a few parents only, with
    coefficients that are exactly zero elsewhere; `top_k` fixes how many.
    Entries tied with the `top_k`-th largest logit are all kept. Input
    `activations` are accepted (checked against the votes) and ignored.
    The router has no weights: one instance may route votes of any size
    with `out_caps >= top_k`.

    Args:
        top_k: `None` for sparsemax, or the number of parents each child
            routes to, `1 <= top_k <= out_caps`.
        temperature: divides the logits, `> 0`.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        votes: `u`, `(batch, in_caps, out_caps, dim)`.
        activations: optional `(batch, in_caps)`, checked and ignored.
        return_coefficients: also return the sparse `C`.

    Returns:
        `(poses (batch, out_caps, dim), lengths (batch, out_caps))`; then
        `C` `(batch, in_caps, out_caps)` with `return_coefficients=True`.

    Example:

    >>> router = keras_capsules.routing.SparseAttentionRouting(top_k=2)
    >>> votes = keras.random.normal((2, 16, 10, 8))
    >>> poses, lengths, c = router(votes, return_coefficients=True)
    >>> tuple(poses.shape), tuple(lengths.shape)
    ((2, 10, 8), (2, 10))
    >>> c = ops.convert_to_numpy(c)
    >>> int((c > 0).sum(-1).max()), float(c.sum(-1).round(3).min())  # 2 parents per child
    (2, 1.0)

    Reference: Geng, Wang, Zhao, Ma & Yang, "OrthCaps: An Orthogonal CapsNet
    with Sparse Attention Routing and Pruning", CVPR 2024.
    """

    def __init__(self, top_k=None, temperature=1.0, **kwargs):
        super().__init__(**kwargs)
        self.top_k = None if top_k is None else positive_int(top_k, "top_k")
        self.temperature = positive_float(temperature, "temperature")

    def check_inputs(self, votes_shape, activations_shape=None):
        super().check_inputs(votes_shape, activations_shape)
        out_caps = votes_shape[2]
        if self.top_k is not None and (out_caps is None or self.top_k > out_caps):
            raise ValueError(
                "`top_k` must be at most out_caps (known). Received: "
                f"top_k={self.top_k} with votes.shape={tuple(votes_shape)}"
            )

    def vote_stddev(self, children, parents, dim, coherent=False):
        """The `Router` default, capped at `(2 * parents * sqrt(children))
        ** -0.5` (`(2 * parents * children * sqrt(dim)) ** -0.5` for
        coherent votes).

        A child's agreement logits `u . sum_i u / sqrt(dim)` spread over
        about `vote_stddev^2 * sqrt(children)` across the parents, and
        sparsemax gives all its weight to one or two parents once that
        spread reaches `1 / parents`: the parents then start as coherent
        sums of the votes, near length 1, where the squash passes back
        little gradient (measured: some seeds never left chance). The cap
        keeps the spread at `1 / (2 * parents)`, where sparsemax starts
        near uniform. Coherent votes (all alike) agree with their sum
        `children` times more: their logits spread over about
        `vote_stddev^2 * children * sqrt(dim)`.
        """
        default = super().vote_stddev(children, parents, dim, coherent)
        if children is None:
            return default
        if coherent:
            return min(default, (2 * parents * children * dim**0.5) ** -0.5)
        return min(default, (2 * parents * children**0.5) ** -0.5)

    def route(self, votes, activations):
        del activations  # Sparse attention routing does not use them.
        dim = votes.shape[-1]
        u = parent_major(votes)
        consensus = ops.sum(u, axis=2)
        logits = agreement(u, consensus) / (dim**0.5 * self.temperature)
        logits = swap_caps(logits)  # the sparse maps work on the last axis
        if self.top_k is None:
            coefficients = sparsemax(logits, axis=-1)
        else:
            coefficients = top_k_softmax(logits, self.top_k)
        poses = squash(weighted_sum(swap_caps(coefficients), u))
        return poses, safe_norm(poses), coefficients

    def get_config(self):
        config = super().get_config()
        config.update(top_k=self.top_k, temperature=self.temperature)
        return config
