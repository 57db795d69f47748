"""EM routing of matrix capsules (Hinton, Sabour & Frosst, 2018)."""

import math

import keras
from keras import ops

from keras_capsules.routing import em_backward
from keras_capsules.routing.base import Router
from keras_capsules.routing.custom_backward import runs_manual_backward
from keras_capsules.routing.parent_major import agreement, parent_major, swap_caps, weighted_sum
from keras_capsules.routing.registry import register
from keras_capsules.validation import is_real, one_of, positive_float, positive_int
from keras_capsules.xla_hint import XlaHinted, xla_compiles

# Added to the summed assignment weights so a parent that receives nothing
# divides by a positive number.
_RSUM_EPSILON = em_backward.RSUM_EPSILON
BACKWARDS = ("manual", "autodiff")


@keras.saving.register_keras_serializable(package="keras_capsules")
@register("em")
class EMRouting(XlaHinted, Router):
    """Expectation-maximisation routing between capsule layers.

    Each parent `j` is a Gaussian with mean `mu` and diagonal variance `var`
    over the `P` pose elements, fitted to the votes `V[b, i, j, :]` of the
    children weighted by their activations `a_in` and assignments `R`. With
    `I = in_caps`, `J = out_caps`:

    ```
    R = full((batch, I, J), 1 / J)
    for t in range(iterations):
        # M-step
        Ra    = R * a_in[:, :, None]
        Rsum  = sum_i Ra + 1e-7                                    # (batch, J)
        mu    = sum_i Ra * V / Rsum                                # (batch, J, P)
        var   = sum_i Ra * (V - mu)^2 / Rsum + epsilon             # (batch, J, P)
        cost  = (beta_u + 0.5 * log(var)) * (Rsum * J / I)         # (batch, J, P)
        a_out = sigmoid(lambda_t * (beta_a - sum_P cost))          # (batch, J)
        if t < iterations - 1:
            # E-step, in log space
            log_p = -sum_P (V - mu)^2 / (2 var) - 0.5 * sum_P log(2 pi var)
            R     = softmax(log(a_out) + log_p, axis=J)
    poses = mu; activations = a_out; coefficients = R (of the last M-step)
    ```

    `beta_u` and `beta_a` are trainable, shape `(out_caps,)`, initialised
    to zeros. The inverse temperature follows `lambda_t = final_lambda *
    (1 - 0.95 ** (t + 1))` unless `inverse_temperature` fixes it. `J / I`
    normalises the amount of data each parent receives (the paper leaves
    the scale of `cost` open; the official code normalises it too). There
    is no stop-gradient, as in the official code. `log(a_out)` is computed
    as `log_sigmoid` of the logit, so it stays finite when `a_out`
    saturates; the variance floor `epsilon` keeps everything finite for a
    parent with a single child or identical votes. `activations=None`
    means all children are active (ones).

    Args:
        iterations: number of EM iterations, `>= 1`.
        final_lambda: scale of the default inverse-temperature schedule.
        inverse_temperature: `None` (the schedule above), a number (a
            constant `lambda`), or a sequence of `iterations` numbers.
        epsilon: variance floor, `> 0`.
        backward: `"manual"` (default) differentiates the routing with a
            backward pass written by hand
            (`keras_capsules.routing.em_backward`): it keeps only the votes
            and `(batch, out_caps, in_caps)`- and `(batch, out_caps, P)`-sized
            tensors per iteration, recomputes one iteration's squared
            deviations at a time and writes the votes' gradient once.
            `"autodiff"` lets the backend differentiate the loop. Both give
            the same gradients (to float32 rounding); the memory and time
            of each are measured in `docs/performance.md`. A speed option:
            not saved in the config.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`).

    `beta_u` and `beta_a` are the router's own per-parent offsets (zeros,
    no regularizer or constraint arguments: they are not kernels).

    Call arguments:
        votes: `V`, `(batch, in_caps, out_caps, P)`, e.g. `P = 16` for
            flattened 4x4 pose matrices.
        activations: `a_in`, `(batch, in_caps)`; `None` means ones.
        return_coefficients: also return `R`.

    Returns:
        `(mu (batch, out_caps, P), a_out (batch, out_caps))`; then `R`
        `(batch, in_caps, out_caps)` with `return_coefficients=True`.

    Example:

    >>> router = keras_capsules.routing.EMRouting(iterations=3)
    >>> votes = keras.random.normal((2, 72, 5, 16))
    >>> poses, activations = router(votes, keras.random.uniform((2, 72)))
    >>> tuple(poses.shape), tuple(activations.shape)
    ((2, 5, 16), (2, 5))
    >>> [tuple(w.shape) for w in router.weights]   # beta_u, beta_a
    [(5,), (5,)]

    Reference: Hinton, Sabour & Frosst, "Matrix capsules with EM routing",
    ICLR 2018 (Procedure 1).
    """

    def __init__(
        self,
        iterations=3,
        final_lambda=1.0,
        inverse_temperature=None,
        epsilon=1e-4,
        backward="manual",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.iterations = positive_int(iterations, "iterations")
        self.final_lambda = positive_float(final_lambda, "final_lambda")
        self.inverse_temperature = _check_inverse_temperature(inverse_temperature, self.iterations)
        self.epsilon = positive_float(epsilon, "epsilon")
        self.backward = one_of(backward, BACKWARDS, "backward")

    weight_axes = (2,)  # beta_u, beta_a: (out_caps,)
    # The poses are the Gaussians' means, returned unscaled beside their
    # activations, in the vector-capsule layers too.
    pose_length = "kept"
    coherent_children_exponent = 0.0  # parents average their votes

    def build(self, votes_shape, activations_shape=None):
        super().build(votes_shape, activations_shape)
        out_caps = votes_shape[2]
        if out_caps is None:
            raise ValueError(
                f"EMRouting needs a known out_caps. Received: votes.shape={tuple(votes_shape)}"
            )
        self.beta_u = self.add_weight(name="beta_u", shape=(out_caps,), initializer="zeros")
        self.beta_a = self.add_weight(name="beta_a", shape=(out_caps,), initializer="zeros")

    def vote_stddev(self, children, parents, dim, coherent=False):
        """1: unit-variance votes (see `Router.vote_stddev`); coherent
        votes: `0.5 / sqrt(dim)`.

        EM fits a Gaussian to each parent's votes: votes of unit variance start
        each Gaussian at log-variance ~0, where its cost and activation are
        near their midpoints (much smaller votes saturate the activations).
        Coherent votes (children alike, one shared transform) have little
        spread at any scale, so the activations start saturated whatever it
        is; the scale then sets only the poses, each the mean of alike votes,
        i.e. one of them: `0.5 / sqrt(dim)` starts them at length ~0.5, as
        the squashed parents of the other routers.
        """
        if coherent:
            return 0.5 / dim**0.5
        return 1.0

    def inverse_temperatures(self):
        """The `lambda_t` of each iteration, as Python floats."""
        if self.inverse_temperature is None:
            return [self.final_lambda * (1.0 - 0.95 ** (t + 1)) for t in range(self.iterations)]
        if isinstance(self.inverse_temperature, float):
            return [self.inverse_temperature] * self.iterations
        return list(self.inverse_temperature)

    def route(self, votes, activations):
        dtype = votes.dtype
        out_caps = votes.shape[2]
        in_caps = ops.cast(ops.shape(votes)[1], dtype)
        u = parent_major(votes)  # (batch, out_caps, in_caps, P)
        if runs_manual_backward(self.backward):
            mu, a_out, coefficients = em_backward.em_routing(
                u,
                activations,
                ops.cast(self.beta_u, dtype),
                ops.cast(self.beta_a, dtype),
                self.inverse_temperatures(),
                self.epsilon,
                fused=xla_compiles(self.xla),
            )
            return mu, a_out, swap_caps(coefficients)
        beta_u = ops.cast(self.beta_u, dtype)[:, None]
        beta_a = ops.cast(self.beta_a, dtype)
        # No activations: every child is active, `R * a_in` is `R`.
        a_in = None if activations is None else activations[:, None, :]
        coefficients = ops.full_like(u[..., 0], 1.0 / out_caps)
        for t, lam in enumerate(self.inverse_temperatures()):
            # M-step: fit each parent's Gaussian to its weighted votes.
            weights = coefficients if a_in is None else coefficients * a_in
            weight_sum = ops.sum(weights, axis=2) + _RSUM_EPSILON
            mu = weighted_sum(weights, u) / weight_sum[..., None]
            # `u + (-mu)`, not `u - mu` (the same numbers): torch's backward
            # of a subtraction negates the full-size gradient before summing
            # it down to mu's shape; an addition passes it through.
            sq_dev = ops.square(u + ops.negative(mu)[:, :, None])
            var = weighted_sum(weights, sq_dev) / weight_sum[..., None] + self.epsilon
            log_var = ops.log(var)
            scale = weight_sum * (out_caps / in_caps)
            cost = ops.sum(beta_u + 0.5 * log_var, axis=-1) * scale
            logits = lam * (beta_a - cost)
            a_out = ops.sigmoid(logits)
            if t < self.iterations - 1:
                # E-step: R_ij proportional to a_j * N(V_ij | mu_j, var_j).
                log_p = -0.5 * agreement(sq_dev, 1.0 / var)
                log_p = log_p - 0.5 * ops.sum(log_var + math.log(2 * math.pi), axis=-1)[..., None]
                coefficients = ops.softmax(ops.log_sigmoid(logits)[..., None] + log_p, axis=1)
        return mu, a_out, swap_caps(coefficients)

    def get_config(self):
        config = super().get_config()
        temperature = self.inverse_temperature
        config.update(
            iterations=self.iterations,
            final_lambda=self.final_lambda,
            inverse_temperature=list(temperature)
            if isinstance(temperature, tuple)
            else temperature,
            epsilon=self.epsilon,
        )
        return config


def _check_inverse_temperature(value, iterations):
    """None, a positive number, or `iterations` positive numbers."""
    if value is None:
        return None
    if is_real(value):
        return positive_float(value, "inverse_temperature")
    if isinstance(value, (list, tuple)) and len(value) == iterations:
        return tuple(positive_float(v, "inverse_temperature") for v in value)
    raise ValueError(
        "`inverse_temperature` must be None, a number > 0 or a sequence of "
        f"`iterations={iterations}` numbers > 0. Received: inverse_temperature={value!r}"
    )
