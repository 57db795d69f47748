"""Self-routing (Hahn et al., 2019), adapted to the vote contract."""

import keras
from keras import ops

from keras_capsules.routing.base import Router
from keras_capsules.routing.registry import register

EPSILON = 1e-7


@keras.saving.register_keras_serializable(package="keras_capsules")
@register("self_routing")
class SelfRouting(Router):
    """Non-iterative routing where each vote decides its own coefficients.

    With votes `u[b, i, j, :]` and child activations `a[b, i]` (ones when
    not given):

    ```
    z[b, i, j] = u[b, i, j] . w[i, j] + c[i, j]       # w: (in, out, dim), c: (in, out)
    r = softmax(z, axis=out_caps)
    activations[b, j] = sum_i a[b, i] r[b, i, j] / (sum_i a[b, i] + 1e-7)
    poses[b, j] = sum_i a[b, i] r[b, i, j] u[b, i, j] / (sum_i a[b, i] r[b, i, j] + 1e-7)
    ```

    `w` and `c` start at zero, so routing is uniform at initialisation;
    the `1e-7` keep the divisions finite when activations are all zero.
    Coefficients returned are `r`.

    Differences from the paper: Hahn et al. compute the logits of child
    `i` from its pose `u_i` with a per-child routing weight, `z_ij =
    W_ij^route u_i`; a router only sees votes, so here each vote
    `u_ij = W_ij u_i` is scored with its own vector `w_ij` (and a bias
    `c_ij`). The paper's activations and pose averages are kept.

    `w` and `c` are the router's own weights (`routing_kernel`,
    `routing_bias`; zeros, no regularizer or constraint arguments).

    Args:
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    Call arguments:
        votes: `u`, `(batch, in_caps, out_caps, dim)`.
        activations: `a`, `(batch, in_caps)`, or `None` (ones).
        return_coefficients: also return `r`.

    Returns:
        `(poses (batch, out_caps, dim), activations (batch, out_caps))`;
        then `r` `(batch, in_caps, out_caps)` with
        `return_coefficients=True`.

    Example:

    >>> router = keras_capsules.routing.SelfRouting()
    >>> poses, activations = router(keras.random.normal((2, 16, 10, 8)),
    ...                             keras.random.uniform((2, 16)))
    >>> tuple(poses.shape), tuple(activations.shape)
    ((2, 10, 8), (2, 10))
    >>> round(float(ops.convert_to_numpy(activations).max()), 3)  # uniform at init: 1 / 10
    0.1

    Reference: Hahn, Pyeon & Kim, "Self-Routing Capsule Networks",
    NeurIPS 2019.
    """

    weight_axes = (1, 2, 3)  # routing_kernel: (in_caps, out_caps, dim)
    # Poses are weighted means of the votes, activations the share of the
    # children a parent takes: the mean's length is not that share, and the
    # vector-capsule layers return the means as they are, beside the
    # activations (rescaled to them, the scores would reach the votes only
    # through the routing weights, which start at 0: the documented
    # composition's held-out accuracy after 200 steps fell from >= 80 % to
    # 60 %).
    pose_length = "kept"
    coherent_children_exponent = 0.0  # parents average their votes

    def build(self, votes_shape, activations_shape=None):
        super().build(votes_shape, activations_shape)
        _, in_caps, out_caps, dim = votes_shape
        if in_caps is None or out_caps is None or dim is None:
            raise ValueError(
                "SelfRouting has routing weights per child, parent and dimension, so "
                "it needs known in_caps, out_caps and dim. For sets or sequences of "
                "any size (in_caps=None), use a router that routes any number of "
                "children (dynamic, em, self_attention, sparse_attention, "
                "inverted_dot_product, cross_attention, or "
                "HeinsenRouting(share_weights=True)), or give the input a fixed size. "
                f"Received: votes.shape={tuple(votes_shape)}"
            )
        self.routing_kernel = self.add_weight(
            name="routing_kernel", shape=(in_caps, out_caps, dim), initializer="zeros"
        )
        self.routing_bias = self.add_weight(
            name="routing_bias", shape=(in_caps, out_caps), initializer="zeros"
        )

    def vote_stddev(self, children, parents, dim, coherent=False):
        """`0.5 * sqrt(children / dim)` (see `Router.vote_stddev`).

        Self-routing averages the votes, so at initialisation (uniform
        coefficients) a parent's pose is the mean of `children` votes of
        random directions, of length `|vote| / sqrt(children)`; votes of
        this standard deviation start the poses at length ~0.5, as the
        squashed parents of the other routers. Coherent votes (all alike)
        average to one of them: `0.5 / sqrt(dim)`. Unknown `children`:
        votes of unit variance.
        """
        if coherent:
            return 0.5 / dim**0.5
        return 1.0 if children is None else 0.5 * (children / dim) ** 0.5

    def route(self, votes, activations):
        kernel = ops.cast(self.routing_kernel, votes.dtype)
        bias = ops.cast(self.routing_bias, votes.dtype)
        # A multiply-and-sum, not an einsum: each (i, j) has its own `w`, so
        # an einsum is a batched matvec over (i, j) that torch runs only
        # after copying the votes to (in, out, batch, dim); XLA fuses both.
        logits = ops.sum(votes * kernel, axis=-1) + bias
        coefficients = ops.softmax(logits, axis=-1)
        if activations is None:
            weighted = coefficients
            total = float(votes.shape[1])
        else:
            weighted = activations[:, :, None] * coefficients
            total = ops.sum(activations, axis=1, keepdims=True)
        mass = ops.sum(weighted, axis=1)
        out_activations = mass / (total + EPSILON)
        poses = ops.einsum("bij,bijd->bjd", weighted, votes) / (mass[..., None] + EPSILON)
        return poses, out_activations, coefficients
