"""EM routing with a backward pass written by hand.

Automatic differentiation of the EM loop keeps, for every iteration, the
vote-sized deviations `V - mu`, their squares and their gradients: a
training step holds 8-14 vote-sized buffers. The backward pass needs only
the votes and, per iteration, the `(B, J, I)` assignments and the
`(B, J, P)` Gaussians. With parent-major votes `u (B, J, I, P)`, weights
`w = R a_in`, `S = sum_i w + 1e-7`, `mu = sum_i w u / S`, `Q = sum_i w
(u - mu)^2`, `var = Q / S + epsilon`, the E-step logits `z = log a_out +
log_p` and `R' = softmax_J(z)`, going back over the iterations with the
gradients `g_mu`, `g_var`, `g_S` of each M-step's outputs:

```
gz    = R' (g_R' - sum_J R' g_R')                      (E-step, t < T - 1)
g_mu += (sum_i gz u - mu sum_i gz) / var
g_var += 0.5 sum_i gz (u - mu)^2 / var^2 - 0.5 sum_i gz / var
g_Q   = g_var / S;  g_M = g_mu / S                      (M = sum_i w u)
g_w   = <(u - mu)^2, g_Q>_P + <u, g_M>_P + g_S
g_u   = w (x) g_M + 2 (w (x) g_Q) * (u - mu) - (gz (x) 1 / var) * (u - mu)
```

(`(x)`: the outer product over `(I, P)` per `(b, j)`; the Q term's own
gradient of `mu` is `-2 g_Q mu * 1e-7`, since `sum_i w (u - mu) = 1e-7
mu`). `g_u` is one batched matmul of stacked outer-product factors plus
the votes times a second one, `L @ R + u * (L2 @ R2)`: the backward writes
the votes' gradient once and otherwise reads `u`, making the squared
deviations of one iteration at a time.
"""

import math

from keras import ops

from keras_capsules.routing.custom_backward import with_backward
from keras_capsules.routing.parent_major import agreement as dot_agreement
from keras_capsules.routing.parent_major import weighted_sum

# Added to the summed assignment weights (EMRouting's _RSUM_EPSILON).
RSUM_EPSILON = 1e-7


def em_routing(u, a_in, beta_u, beta_a, lambdas, epsilon, fused):
    """Routes parent-major votes; returns `(mu, a_out, R)` with the
    gradient above.

    Args:
        u: parent-major votes `(B, J, I, P)`, float32 or float64.
        a_in: child activations `(B, I)`, or `None` (all ones).
        beta_u, beta_a: `(J,)` tensors of the votes' dtype.
        lambdas: the inverse temperature of each iteration (floats).
        epsilon: the variance floor.
        fused: whether XLA compiles the routing: the votes' gradient is
            then a sum of broadcast products, which XLA fuses into one pass;
            otherwise batched matmuls.

    Returns:
        `mu (B, J, P)`, `a_out (B, J)` and the last M-step's assignments
        `R (B, J, I)`. Their gradients with respect to every input equal
        automatic differentiation of `EMRouting`'s loop.
    """
    dim = u.shape[-1]
    options = (tuple(lambdas), epsilon, fused)

    # Without activations the routing has no `a_in` input to differentiate.
    inputs = [u, beta_u, beta_a] if a_in is None else [u, a_in, beta_u, beta_a]

    def split(inputs):
        """`(u, a_in or None, beta_u, beta_a)`."""
        return (inputs[0], None, *inputs[1:]) if a_in is None else tuple(inputs)

    def forward(*inputs):
        return _forward(*split(inputs), *options[:2])

    def backward(inputs, saved, upstream):
        votes, a, bu, _ = split(inputs)
        gu, g_a, g_beta_u, g_beta_a = _backward(votes, a, bu, saved, upstream, *options)
        return (gu, g_beta_u, g_beta_a) if a_in is None else (gu, g_a, g_beta_u, g_beta_a)

    # One output (torch's custom gradients take one upstream tensor): the
    # means, the activations and the assignments side by side.
    packed = with_backward(forward, backward, inputs)
    return packed[..., :dim], packed[..., dim], packed[..., dim + 1 :]


def _forward(u, a_in, beta_u, beta_a, lambdas, epsilon):
    """The EM loop; returns the packed `[mu, a_out, R]` and, per
    iteration, the `(B, J, I)` and `(B, J, P)` tensors the backward needs."""
    parents = u.shape[1]
    ratio = _parents_per_child(u)
    a = None if a_in is None else a_in[:, None, :]
    log_2pi = math.log(2 * math.pi)
    beta = beta_u[:, None]
    saved = []
    coefficients = ops.full_like(u[..., 0], 1.0 / parents)
    for t, lam in enumerate(lambdas):
        weights = coefficients if a is None else coefficients * a
        weight_sum = ops.sum(weights, axis=2) + RSUM_EPSILON
        mu = weighted_sum(weights, u) / weight_sum[..., None]
        sq_dev = ops.square(u + ops.negative(mu)[:, :, None])
        var = weighted_sum(weights, sq_dev) / weight_sum[..., None] + epsilon
        log_var = ops.log(var)
        cost = ops.sum(beta + 0.5 * log_var, axis=-1) * (weight_sum * ratio)
        logits = lam * (beta_a - cost)
        a_out = ops.sigmoid(logits)
        step = {"c": coefficients, "w": weights, "S": weight_sum, "mu": mu, "var": var}
        step.update(log_var=log_var, logits=logits)
        saved.append(step)
        if t < len(lambdas) - 1:
            log_p = -0.5 * dot_agreement(sq_dev, 1.0 / var)
            log_p = log_p - 0.5 * ops.sum(log_var + log_2pi, axis=-1)[..., None]
            coefficients = ops.softmax(ops.log_sigmoid(logits)[..., None] + log_p, axis=1)
    packed = ops.concatenate([mu, a_out[..., None], coefficients], axis=-1)
    return packed, saved


def _backward(u, a_in, beta_u, saved, upstream, lambdas, epsilon, fused):
    """Gradients of `u`, `a_in` (or None), `beta_u` and `beta_a`."""
    dim = u.shape[3]
    ratio = _parents_per_child(u)
    a = None if a_in is None else a_in[:, None, :]
    beta = beta_u[:, None]
    g_mu_out, g_a_out, g_c = upstream[..., :dim], upstream[..., dim], upstream[..., dim + 1 :]
    left, right = [], []  # gu = left @ right + u * (left2 @ right2), on a K axis
    left2, right2 = [], []
    g_beta_u = g_beta_a = g_a_in = None
    g_next = None  # gradient of the coefficients the E-step of iteration t made
    last = len(lambdas) - 1
    for t in range(last, -1, -1):
        step = saved[t]
        w, weight_sum, mu, var = step["w"], step["S"], step["mu"], step["var"]
        logits = step["logits"]
        if t == last:
            a_out = ops.sigmoid(logits)
            g_logits = g_a_out * a_out * (1.0 - a_out)
            g_mu = g_mu_out
        else:
            g_logits = ops.zeros_like(logits)
            g_mu = ops.zeros_like(mu)
        sq_dev = ops.square(u + ops.negative(mu)[:, :, None])
        g_var = ops.zeros_like(var)
        if t < last:
            # E-step: R' = softmax_J(log_sigmoid(logits) + log_p).
            c_next = saved[t + 1]["c"]
            gz = c_next * (g_next - ops.sum(c_next * g_next, axis=1, keepdims=True))
            gz_sum = ops.sum(gz, axis=2)  # (B, J)
            g_logits = g_logits + gz_sum * ops.sigmoid(-logits)
            inv_var = 1.0 / var
            g_var = g_var + 0.5 * weighted_sum(gz, sq_dev) * ops.square(inv_var)
            g_var = g_var - 0.5 * gz_sum[..., None] * inv_var
            g_mu = g_mu + (weighted_sum(gz, u) - mu * gz_sum[..., None]) * inv_var
            left += [gz]
            right += [mu * inv_var]
            left2 += [gz]
            right2 += [-inv_var]
        # Activation: logits = lam * (beta_a - sum_P(beta_u + 0.5 log var) * S * ratio).
        lam = lambdas[t]
        g_cost = -lam * g_logits
        scale = weight_sum * ratio
        g_lvsum = g_cost * scale  # of sum_P(beta_u + 0.5 log var)
        g_beta_a = _add(g_beta_a, lam * ops.sum(g_logits, axis=0))
        g_beta_u = _add(g_beta_u, dim * ops.sum(g_lvsum, axis=0))
        g_var = g_var + 0.5 * g_lvsum[..., None] / var
        lvsum = ops.sum(beta + 0.5 * step["log_var"], axis=-1)
        g_weight_sum = g_cost * lvsum * ratio
        # var = Q / S + epsilon; mu = M / S.
        g_q = g_var / weight_sum[..., None]
        g_weight_sum = g_weight_sum - ops.sum(g_var * (var - epsilon), axis=-1) / weight_sum
        g_mu = g_mu - 2.0 * RSUM_EPSILON * g_q * mu  # Q's own dependence on mu
        g_m = g_mu / weight_sum[..., None]
        g_weight_sum = g_weight_sum - ops.sum(g_mu * mu, axis=-1) / weight_sum
        g_w = dot_agreement(sq_dev, g_q) + dot_agreement(u, g_m) + g_weight_sum[..., None]
        del sq_dev
        left += [w]
        right += [g_m - 2.0 * g_q * mu]
        left2 += [w]
        right2 += [2.0 * g_q]
        # w = c * a_in.
        if a is None:
            g_coefficients = g_w
        else:
            g_coefficients = g_w * a
            g_a_in = _add(g_a_in, ops.sum(g_w * step["c"], axis=1))
        if t == last:
            g_coefficients = g_coefficients + g_c
        g_next = g_coefficients  # the first coefficients are uniform: not used
    if fused:
        # XLA fuses the sums of broadcast products into one pass.
        gu = sum(x[..., None] * y[:, :, None] for x, y in zip(left, right))
        gu = gu + u * sum(x[..., None] * y[:, :, None] for x, y in zip(left2, right2))
    else:
        # einsum, not ops.matmul: Keras 3.15's torch matmul returns float32
        # for float64 inputs.
        gu = u * _outer_sum(left2, right2)
        gu = gu + _outer_sum(left, right)
    return gu, g_a_in, g_beta_u, g_beta_a


def _parents_per_child(u):
    """`J / I`, the scale of each parent's cost (the children may be unknown
    until the votes arrive)."""
    return u.shape[1] / ops.cast(ops.shape(u)[2], u.dtype)


def _outer_sum(left, right):
    """`sum_k left[k] (x) right[k]`: `(B, J, I)` and `(B, J, P)` factors."""
    return ops.einsum("bjik,bjkp->bjip", ops.stack(left, axis=-1), ops.stack(right, axis=2))


def _add(total, term):
    return term if total is None else total + term
