"""Inverted dot-product attention routing with a backward pass written by hand.

Automatic differentiation of the routing loop writes one vote-sized
gradient per use of the votes in every iteration (each weighted sum, each
agreement) and adds them up. With parent-major votes `u (B, J, I, D)`,
`s_0 = sum_i u / J`, `v_r = LayerNorm(s_r)`, `c_r = softmax_J(<u, v_{r-1}>_D
/ k)` (`k = sqrt(D) * temperature`) and `s_r = sum_i c_r u` for `r >= 1`,
going back over the iterations with the gradient `gv_r` of each `v_r`:

```
gs_r     = layer_norm_vjp(s_r, gv_r) (+ the upstream gradient of s_R)
gc_r     = <u, gs_r>_D (+ the upstream gradient of c_R)
gl_r     = c_r (gc_r - sum_J c_r gc_r) / k
gv_{r-1} = sum_i gl_r u
gu       = sum_r c_r (x) gs_r + sum_r gl_r (x) v_{r-1}     (c_0 = 1 / J)
```

(`(x)`: the outer product over `(I, D)` per `(b, j)`), one batched matmul
of stacked factors (under XLA a sum of broadcast products, which it fuses
into one pass): the backward writes the votes' gradient once. The
LayerNorm's scale and offset get `sum gv_r * normed_r` and `sum gv_r`.
"""

from keras import ops

from keras_capsules.routing.custom_backward import with_backward
from keras_capsules.routing.parent_major import agreement as dot_agreement
from keras_capsules.routing.parent_major import weighted_sum


def inverted_dot_product_routing(u, scale, offset, iterations, temperature, epsilon, fused):
    """Routes parent-major votes; returns `(v, s, c)` with the gradient above.

    Args:
        u: parent-major votes `(B, J, I, D)`, float32 or float64.
        scale, offset: the LayerNorm's `(D,)` weights, in the votes' dtype.
        iterations, temperature: as for `InvertedDotProductRouting`.
        epsilon: the LayerNorm's epsilon.
        fused: whether XLA compiles the routing (see above).

    Returns:
        the poses `v (B, J, D)`, the last sums `s (B, J, D)` and the last
        coefficients `c (B, J, I)` (uniform, `1 / J`, after one iteration);
        their gradients with respect to `u`, the scale and the offset equal
        automatic differentiation of the router's loop.
    """
    parents, dim = u.shape[1], u.shape[-1]
    k = dim**0.5 * temperature

    def mean(x):
        # Not ops.mean: Keras 3.15's torch mean loses float64 precision.
        return ops.sum(x, axis=-1, keepdims=True) / dim

    def layer_norm(s, scale, offset):
        centred = s - mean(s)
        rstd = ops.rsqrt(mean(ops.square(centred)) + epsilon)
        normed = centred * rstd
        return normed * scale + offset, normed, rstd

    def forward(u, scale, offset):
        saved = []
        c = ops.full_like(u[..., 0], 1.0 / parents)
        s = ops.sum(u, axis=2) / parents
        v, normed, rstd = layer_norm(s, scale, offset)
        saved.append({"c": c, "v": v, "normed": normed, "rstd": rstd})
        for _ in range(iterations - 1):
            c = ops.softmax(dot_agreement(u, v) / k, axis=1)
            s = weighted_sum(c, u)
            v, normed, rstd = layer_norm(s, scale, offset)
            saved.append({"c": c, "v": v, "normed": normed, "rstd": rstd})
        # One output (torch's custom gradients take one upstream tensor).
        return ops.concatenate([v, s, c], axis=-1), saved

    def backward(inputs, saved, upstream):
        u, scale, _ = inputs
        gv, g_s_out, g_c_out = (
            upstream[..., :dim],
            upstream[..., dim : 2 * dim],
            upstream[..., 2 * dim :],
        )
        left, right = [], []
        g_scale = g_offset = 0.0
        for r in range(iterations - 1, -1, -1):
            step = saved[r]
            normed, rstd = step["normed"], step["rstd"]
            g_scale = g_scale + ops.sum(gv * normed, axis=(0, 1))
            g_offset = g_offset + ops.sum(gv, axis=(0, 1))
            g_normed = gv * scale
            gs = rstd * (g_normed - mean(g_normed) - normed * mean(g_normed * normed))
            if r == iterations - 1:
                gs = gs + g_s_out
            left.append(step["c"])
            right.append(gs)
            if r == 0:
                break  # c_0 is uniform
            gc = dot_agreement(u, gs)
            if r == iterations - 1:
                gc = gc + g_c_out
            c = step["c"]
            gl = c * (gc - ops.sum(c * gc, axis=1, keepdims=True)) / k
            left.append(gl)
            right.append(saved[r - 1]["v"])
            gv = weighted_sum(gl, u)
        if fused:
            gu = sum(a[..., None] * b[:, :, None] for a, b in zip(left, right))
        else:
            # einsum, not ops.matmul: Keras 3.15's torch matmul returns
            # float32 for float64 inputs.
            gu = ops.einsum("bjik,bjkd->bjid", ops.stack(left, axis=-1), ops.stack(right, axis=2))
        return gu, g_scale, g_offset

    packed = with_backward(forward, backward, [u, scale, offset])
    return packed[..., :dim], packed[..., dim : 2 * dim], packed[..., 2 * dim :]
