"""Heinsen routing: "An Algorithm for Routing Capsules in All Domains" (Heinsen, 2019)."""

import keras
from keras import ops

from keras_capsules.routing.base import Router
from keras_capsules.routing.parent_major import agreement, parent_major, swap_caps, weighted_sum
from keras_capsules.routing.registry import register
from keras_capsules.validation import boolean, positive_float, positive_int


@keras.saving.register_keras_serializable(package="keras_capsules")
@register("heinsen")
class HeinsenRouting(Router):
    """Heinsen's routing: each parent is a Gaussian that the children it
    explains (`D_use`) fit, and its score weighs what it uses and ignores.

    With votes `V[b, i, j, :]` (`I = in_caps`, `J = out_caps`, `P = dim`,
    e.g. a flattened `d_cov x d_out` pose matrix), input scores `a_inp`
    (logits, `(batch, I)`) and `f = sigmoid`:

    ```
    for t in range(iterations):
        # E-step
        if t == 0:
            R = full((batch, I, J), 1 / J)
        else:
            log_p = -sum_P (V - mu)^2 / (2 sig2) - sum_P log sqrt(sig2)
            R = softmax_J(log f(a_out) + log_p)
        # D-step
        D_use = f(a_inp)[:, :, None] * R
        D_ign = f(a_inp)[:, :, None] - D_use
        # M-step
        a_out = sum_I beta_use * D_use - sum_I beta_ign * D_ign    # (batch, J)
        mu    = sum_I D_use * V / (sum_I D_use + epsilon)          # (batch, J, P)
        sig2  = sum_I D_use * (V - mu)^2 / (sum_I D_use + epsilon) + epsilon
    poses = mu; activations = a_out; coefficients = R (of the last iteration)
    ```

    `log_p` is the author's simplified log-likelihood (the constant
    `-P/2 log(2 pi)` dropped: it cancels in the softmax). `beta_use` and
    `beta_ign` are trainable, `(in_caps, out_caps)`, or `(1, out_caps)`
    shared by every child with `share_weights=True`, which then routes any
    number of children (unknown `in_caps` too), as the author's `n_inp=-1`.
    They start at zeros (the author's initialisation). `activations=None`
    means every child is present (`f(a_inp) = 1`).

    Activations in and out are logits (`logit_activations = True`), the
    author's scores: a model chains routers by passing `a_out` on as the
    next `a_inp`, and trains on `a_out` with a softmax cross-entropy. In the
    vector-capsule layers (`Capsule(..., router="heinsen")`,
    `ConvCapsule2D`) the parents' poses get the length `sigmoid(a_out)` and
    those are their activations, as with every router there (so `Length`
    and `MarginLoss` apply). The variances `sig2`, which the author's
    model returns too, come with `return_variances=True`.

    Routing runs in float32 under mixed precision; `epsilon` keeps `sig2`
    positive, so identical or zero votes give finite outputs and gradients.

    Args:
        iterations: number of routing iterations, `>= 1` (the author: 3).
        epsilon: added to the summed `D_use` and to the variances, `> 0`
            (the author's `eps`, 1e-5).
        share_weights: one `beta_use`, `beta_ign` per parent for all
            children, `(1, out_caps)`; any `in_caps` is then accepted.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    `beta_use` and `beta_ign` are the router's own weights (zeros, no
    regularizer or constraint arguments: they are not kernels).

    Call arguments:
        votes: `V`, `(batch, in_caps, out_caps, P)`.
        activations: `a_inp`, logits `(batch, in_caps)`; `None`: all present.
        return_coefficients: also return `R`, `(batch, in_caps, out_caps)`.
        return_variances: also return `sig2`, `(batch, out_caps, P)`.

    Returns:
        `(mu (batch, out_caps, P), a_out (batch, out_caps))`, then `R`
        with `return_coefficients=True`, then `sig2` with
        `return_variances=True`, in the layer's compute dtype.

    Example:

    >>> router = keras_capsules.routing.HeinsenRouting(iterations=3)
    >>> votes = keras.random.normal((2, 72, 5, 16))
    >>> poses, scores, variances = router(
    ...     votes, keras.random.normal((2, 72)), return_variances=True)
    >>> tuple(poses.shape), tuple(scores.shape), tuple(variances.shape)
    ((2, 5, 16), (2, 5), (2, 5, 16))
    >>> [tuple(w.shape) for w in router.weights]   # beta_use, beta_ign
    [(72, 5), (72, 5)]

    Reference: Heinsen, "An Algorithm for Routing Capsules in All Domains",
    arXiv:1911.00792, 2019 (the algorithm of its Figure 1; official code:
    github.com/glassroom/heinsen_routing).
    """

    logit_activations = True
    pose_length = "rescaled"  # means; their length is not the logit's sigmoid
    accepts_share_weights = True
    extra_outputs = ("variances",)
    coherent_children_exponent = 0.0  # parents average their votes

    def __init__(self, iterations=3, epsilon=1e-5, share_weights=False, **kwargs):
        super().__init__(**kwargs)
        self.iterations = positive_int(iterations, "iterations")
        self.epsilon = positive_float(epsilon, "epsilon")
        self.share_weights = boolean(share_weights, "share_weights")

    @property
    def weight_axes(self):
        # beta_use, beta_ign: (out_caps,) shared, else (in_caps, out_caps).
        return (2,) if self.share_weights else (1, 2)

    def build(self, votes_shape, activations_shape=None):
        super().build(votes_shape, activations_shape)
        in_caps, out_caps = votes_shape[1], votes_shape[2]
        if out_caps is None:
            raise ValueError(
                "HeinsenRouting needs a known out_caps (its betas are per parent). "
                f"Received: votes.shape={tuple(votes_shape)}"
            )
        if in_caps is None and not self.share_weights:
            # The layer's `share_weights` shares its transforms, not these.
            raise ValueError(
                "HeinsenRouting(share_weights=False) has a beta_use and beta_ign per "
                "child, so it needs a known number of children. For sets or "
                "sequences of any size (in_caps=None), give the router itself "
                "share_weights=True: router=HeinsenRouting(share_weights=True) (the "
                "layer's share_weights=True shares its transforms, not the router's "
                "weights), or give the input a fixed size. "
                f"Received: votes.shape={tuple(votes_shape)}"
            )
        shape = (1 if self.share_weights else in_caps, out_caps)
        self.beta_use = self.add_weight(name="beta_use", shape=shape, initializer="zeros")
        self.beta_ign = self.add_weight(name="beta_ign", shape=shape, initializer="zeros")

    def vote_stddev(self, children, parents, dim, coherent=False):
        """1: unit-variance votes (see `Router.vote_stddev`).

        Each parent fits its own variance to the votes, so their scale
        only matters against `epsilon`; the length of a vector capsule's
        pose is `sigmoid(a_out)` whatever it is.
        """
        return 1.0

    def call(
        self,
        votes,
        activations=None,
        return_coefficients=False,
        return_variances=False,
    ):
        keep = (0, 1) + ((2,) if return_coefficients else ()) + ((3,) if return_variances else ())
        return self.routed_outputs(votes, activations, keep)

    def route(self, votes, activations):
        """`(mu, a_out, R, sig2)`; see the class docstring."""
        dtype = votes.dtype
        out_caps = votes.shape[2]
        eps = self.epsilon
        u = parent_major(votes)  # (batch, J, I, P)
        # (J, I) or (J, 1): broadcast against the parent-major (batch, J, I).
        beta_use = ops.transpose(ops.cast(self.beta_use, dtype), (1, 0))
        beta_ign = ops.transpose(ops.cast(self.beta_ign, dtype), (1, 0))
        present = None if activations is None else ops.sigmoid(activations)[:, None, :]

        def d_and_m_steps(coefficients):
            # D-step: what each parent uses of each child, and ignores.
            if present is None:
                use, ignore = coefficients, 1.0 - coefficients
            else:
                use = present * coefficients
                ignore = present - use
            # M-step.
            a_out = ops.sum(beta_use * use, axis=2) - ops.sum(beta_ign * ignore, axis=2)
            over_use = 1.0 / (ops.sum(use, axis=2) + eps)  # (batch, J)
            mu = weighted_sum(use, u) * over_use[..., None]
            # `u + (-mu)`: see EMRouting (torch's backward of a subtraction).
            sq_dev = ops.square(u + ops.negative(mu)[:, :, None])
            sig2 = weighted_sum(use, sq_dev) * over_use[..., None] + eps
            return a_out, mu, sq_dev, sig2

        coefficients = ops.full_like(u[..., 0], 1.0 / out_caps)  # (batch, J, I)
        a_out, mu, sq_dev, sig2 = d_and_m_steps(coefficients)
        for _ in range(1, self.iterations):
            # E-step: the author's simplified log p(V | mu, sig2).
            log_p = -agreement(sq_dev, 1.0 / (2.0 * sig2))
            log_p = log_p - 0.5 * ops.sum(ops.log(sig2), axis=-1)[..., None]
            coefficients = ops.softmax(ops.log_sigmoid(a_out)[..., None] + log_p, axis=1)
            a_out, mu, sq_dev, sig2 = d_and_m_steps(coefficients)
        return mu, a_out, swap_caps(coefficients), sig2

    def compute_output_shape(
        self,
        votes_shape,
        activations_shape=None,
        return_coefficients=False,
        return_variances=False,
    ):
        shapes = super().compute_output_shape(votes_shape, activations_shape, return_coefficients)
        if return_variances:
            shapes += (shapes[0],)
        return shapes

    def compute_output_spec(
        self,
        votes,
        activations=None,
        return_coefficients=False,
        return_variances=False,
    ):
        shapes = self.compute_output_shape(
            votes.shape,
            None if activations is None else activations.shape,
            return_coefficients,
            return_variances,
        )
        return tuple(keras.KerasTensor(s, dtype=self.compute_dtype) for s in shapes)

    def get_config(self):
        config = super().get_config()
        config.update(
            iterations=self.iterations,
            epsilon=self.epsilon,
            share_weights=self.share_weights,
        )
        return config
