"""Dynamic routing with a backward pass written by hand.

Automatic differentiation of the routing loop keeps, for every iteration,
the vote-sized tensors it made (products, differences, their gradients):
a training step then holds 6-8 vote-sized buffers without XLA. The
backward pass needs far less. With parent-major votes `u (B, J, I, D)`,
coefficients `c_r (B, J, I)`, sums `s_r` and poses `v_r = squash(s_r)`
`(B, J, D)`, logits `b_{r+1} = b_r + step * A(u, v_r)` and upstream
gradients `gv` (and `gc` of the last coefficients), going back over the
iterations:

```
gv_r = gv                                      (r = R - 1)
     = d/dv_r <step * gb_{r+1}, A(u, v_r)>     (r < R - 1)
gs_r = squash_vjp(s_r, gv_r)
gb_r = gb_{r+1} + softmax_vjp(c_r, <u, gs_r>_D (+ gc)) / temperature
gu   = sum_r c_r (x) gs_r + sum_r step * gb_{r+1} (x) dA/du-factor
       + sum_r diag_r * u                      (cosine, euclidean only)
```

Every term of `gu` but the last is an outer product over `(I, D)` per
`(b, j)`, so `gu` is one batched matmul of the stacked `(B, J, I, K)`
and `(B, J, K, D)` factors (`K <= 2R - 1`; under XLA a sum of broadcast
products, which it fuses into the same single pass): the backward writes one
vote-sized buffer and otherwise reads `u`, so a step holds the votes, their
gradient and what the capsule layer's own gradient needs.
"""

from keras import ops

from keras_capsules.routing.custom_backward import with_backward
from keras_capsules.routing.parent_major import agreement as dot_agreement
from keras_capsules.routing.parent_major import weighted_sum

# The squash's and safe_norm's epsilon (keras_capsules.ops).
_EPSILON = 1e-7


def _squash_forward(s):
    n2 = ops.sum(ops.square(s), axis=-1, keepdims=True)
    root = ops.sqrt(n2 + _EPSILON)
    return s * (n2 / ((1.0 + n2) * root)), n2, root


def _squash_vjp(s, n2, root, gv):
    """Gradient of `squash(s) = s * g(n2)`, `g = n2 / ((1 + n2) sqrt(n2 + eps))`:
    `gv * g + 2 s <s, gv> g'(n2)`, with `g'` written without `1 / n2`, so it
    is finite at `s = 0`."""
    g = n2 / ((1.0 + n2) * root)
    dg = 1.0 / ((1.0 + n2) * root) - g / (1.0 + n2) - 0.5 * g / (n2 + _EPSILON)
    return gv * g + s * (2.0 * dg * ops.sum(s * gv, axis=-1, keepdims=True))


def _softmax_vjp(c, gc):
    """Gradient of `c = softmax(b, axis=1)` (over parents)."""
    return c * (gc - ops.sum(c * gc, axis=1, keepdims=True))


def dynamic_routing(u, iterations, temperature, agreement, step_size, stop_gradient, fused):
    """Routes parent-major votes; returns `(v, c)` with the gradient above.

    Args:
        u: parent-major votes `(B, J, I, D)`, float32 or float64.
        iterations, temperature, agreement, step_size, stop_gradient: as
            for `DynamicRouting`.
        fused: whether XLA compiles the routing: the votes' gradient is
            then a sum of broadcast products, which XLA fuses into one
            pass; otherwise one batched matmul.

    Returns:
        `v (B, J, D)` and the last coefficients `c (B, J, I)`. Their
        gradient with respect to `u` is the backward pass above; it equals
        automatic differentiation of the same loop.
    """
    dim = u.shape[-1]
    options = (iterations, temperature, agreement, step_size, stop_gradient)

    def backward(inputs, saved, upstream):
        return (_backward(inputs[0], saved, upstream, *options, fused),)

    # One output, since torch's custom gradients take one upstream tensor:
    # the poses and the coefficients side by side, split again below.
    packed = with_backward(lambda u: _forward(u, *options), backward, [u])
    return packed[..., :dim], packed[..., dim:]


def _forward(u, iterations, temperature, agreement, step_size, stop_gradient):
    """The routing loop; returns the packed `[v, c]` and, per iteration,
    the `(B, J, D)` and `(B, J, I)` tensors the backward pass needs."""
    parents = u.shape[1]
    saved = []
    u_norm = None
    if agreement == "cosine":
        u_norm = ops.sqrt(ops.sum(ops.square(u), axis=-1) + _EPSILON)
    logits = None
    c = ops.full_like(u[..., 0], 1.0 / parents)
    for r in range(iterations):
        if logits is not None:
            c = ops.softmax(logits / temperature, axis=1)
        s = weighted_sum(c, u)
        v, n2, root = _squash_forward(s)
        step = {"c": c, "s": s, "n2": n2, "root": root, "v": v, "u_norm": u_norm}
        if r < iterations - 1:
            a, extra = _agreement(u, v, u_norm, agreement)
            step.update(extra)
            update = a * step_size
            logits = update if logits is None else logits + update
        saved.append(step)
    return ops.concatenate([v, c], axis=-1), saved


def _backward(
    u, saved, upstream, iterations, temperature, agreement, step_size, stop_gradient, fused
):
    """The votes' gradient for the packed upstream gradient `[gv, gc]`."""
    dim = u.shape[-1]
    gv, gc = upstream[..., :dim], upstream[..., dim:]
    left, right = [], []  # gu = left @ right, stacked on a K axis
    diag = None  # gu += diag[..., None] * u
    gb = None  # gradient of the logits b_{r+1} fed to iteration r + 1
    first = iterations - 1 if stop_gradient else 0
    for r in range(iterations - 1, first - 1, -1):
        step = saved[r]
        if r < iterations - 1:
            ga = gb * step_size
            gv, outer, d = _agreement_vjp(u, step, ga, agreement)
            left.append(outer[0])
            right.append(outer[1])
            if d is not None:
                diag = d if diag is None else diag + d
        gs = _squash_vjp(step["s"], step["n2"], step["root"], gv)
        left.append(step["c"])
        right.append(gs)
        if r == 0 or stop_gradient:
            continue  # c_0 is uniform: no logits to differentiate
        g_coefficients = dot_agreement(u, gs)
        if r == iterations - 1:
            g_coefficients = g_coefficients + gc
        g_logits = _softmax_vjp(step["c"], g_coefficients) / temperature
        gb = g_logits if gb is None else gb + g_logits
    if fused:
        # XLA fuses the sum of products into one pass that writes `gu`; its
        # CPU dot of a K = 2R - 1 contraction is slower (1.25x the step).
        gu = sum(a[..., None] * b[:, :, None] for a, b in zip(left, right))
    else:
        # Unfused, each product would be a vote-sized temporary. An einsum,
        # not ops.matmul: Keras 3.15's torch matmul returns float32 for
        # float64 inputs.
        gu = ops.einsum("bjik,bjkd->bjid", ops.stack(left, axis=-1), ops.stack(right, axis=2))
    if diag is not None:
        gu = gu + diag[..., None] * u
    return gu


def _agreement(u, v, u_norm, agreement):
    """`(B, J, I)` agreement of `u` with `v` and what its gradient needs."""
    if agreement == "euclidean":
        return -ops.sum(ops.square(u - v[:, :, None]), axis=-1), {}
    dot = dot_agreement(u, v)
    if agreement == "cosine":
        v_norm = ops.sqrt(ops.sum(ops.square(v), axis=-1) + _EPSILON)
        a = dot / (u_norm * v_norm[:, :, None])
        return a, {"a": a, "v_norm": v_norm}
    return dot, {}


def _agreement_vjp(u, step, ga, agreement):
    """For `ga`, the gradient of the agreement `A(u, v)`: the gradient of
    `v`, the outer-product factors `(B, J, I)`, `(B, J, D)` of the votes'
    gradient and its `diag` factor (`diag[..., None] * u`, or None)."""
    v = step["v"]
    if agreement == "dot":
        return weighted_sum(ga, u), (ga, v), None
    if agreement == "euclidean":
        # A = -sum_d (u - v)^2: dA/du = -2 (u - v), dA/dv = 2 sum_i (u - v).
        gv = 2.0 * (weighted_sum(ga, u) - ops.sum(ga, axis=-1)[..., None] * v)
        return gv, (2.0 * ga, v), -2.0 * ga
    # Cosine: A = <u, v> / (|u| |v|), |x| = sqrt(sum x^2 + eps).
    a, v_norm, u_norm = step["a"], step["v_norm"], step["u_norm"]
    scaled = ga / (u_norm * v_norm[:, :, None])
    gv = weighted_sum(scaled, u) - (ops.sum(ga * a, axis=-1) / ops.square(v_norm))[..., None] * v
    return gv, (scaled, v), -ga * a / ops.square(u_norm)
