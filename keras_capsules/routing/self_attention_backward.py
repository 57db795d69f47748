"""Self-attention routing with a backward pass written by hand.

Automatic differentiation of the routing writes one vote-sized gradient
per use of the votes (the weighted sum, the agreement, the consensus) and
then adds them up. With parent-major votes `u (B, J, I, D)`, `cons = sum_i
u`, logits `l = <u, cons>_D / k` (`k = sqrt(D) * temperature`), `p =
softmax_J(l)`, coefficients `c = p + B^T`, `s = sum_i c u` and poses
`efficient_squash(s)`, the gradients for upstream `g_poses` and `g_c`:

```
gs     = efficient_squash_vjp(s, g_poses)
gc     = <u, gs>_D + g_c;        g_B = sum_b gc^T
gl     = p (gc - sum_J p gc) / k
g_cons = sum_i gl u
gu     = c (x) gs + gl (x) cons + 1 (x) g_cons
```

(`(x)`: the outer product over `(I, D)` per `(b, j)`), one batched matmul
of stacked factors (under XLA a sum of broadcast products, which it fuses
into one pass): the backward writes the votes' gradient once.
"""

from keras import ops

from keras_capsules.routing.custom_backward import with_backward
from keras_capsules.routing.parent_major import agreement as dot_agreement
from keras_capsules.routing.parent_major import weighted_sum

# efficient_squash's epsilon (keras_capsules.ops).
_EPSILON = 1e-7


def self_attention_routing(u, priors, temperature, fused):
    """Routes parent-major votes; returns `(poses, c)` with the gradient above.

    Args:
        u: parent-major votes `(B, J, I, D)`, float32 or float64.
        priors: the priors `B^T`, `(J, I)` in the votes' dtype, or `None`.
        temperature: divides the logits.
        fused: whether XLA compiles the routing (see above).

    Returns:
        `poses (B, J, D)` and the coefficients `c (B, J, I)`; their
        gradients with respect to `u` and the priors equal automatic
        differentiation of `SelfAttentionRouting`'s routing.
    """
    dim = u.shape[-1]
    scale = dim**0.5 * temperature

    def forward(u, priors=None):
        consensus = ops.sum(u, axis=2)
        p = ops.softmax(dot_agreement(u, consensus) / scale, axis=1)
        c = p if priors is None else p + priors
        s = weighted_sum(c, u)
        n = ops.sqrt(ops.sum(ops.square(s), axis=-1, keepdims=True) + _EPSILON)
        h = (1.0 - ops.exp(-n)) / n
        saved = {"consensus": consensus, "p": p, "c": c, "s": s, "n": n, "h": h}
        # One output (torch's custom gradients take one upstream tensor).
        return ops.concatenate([h * s, c], axis=-1), saved

    def backward(inputs, saved, upstream):
        u = inputs[0]
        g_poses, g_c = upstream[..., :dim], upstream[..., dim:]
        s, n, h = saved["s"], saved["n"], saved["h"]
        # poses = h(n) s, h = (1 - e^-n) / n: dh/dn / n = (e^-n - h) / n^2.
        gs = h * g_poses + s * (
            ops.sum(s * g_poses, axis=-1, keepdims=True) * (ops.exp(-n) - h) / ops.square(n)
        )
        gc = dot_agreement(u, gs) + g_c
        p = saved["p"]
        gl = p * (gc - ops.sum(p * gc, axis=1, keepdims=True)) / scale
        g_consensus = weighted_sum(gl, u)
        left = (saved["c"], gl, ops.ones_like(gl))
        right = (gs, saved["consensus"], g_consensus)
        if fused:
            gu = sum(a[..., None] * b[:, :, None] for a, b in zip(left, right))
        else:
            # einsum, not ops.matmul: Keras 3.15's torch matmul returns
            # float32 for float64 inputs.
            gu = ops.einsum("bjik,bjkd->bjid", ops.stack(left, axis=-1), ops.stack(right, axis=2))
        return (gu, ops.sum(gc, axis=0))[: len(inputs)]

    # Without priors the routing has no second input to differentiate.
    inputs = [u] if priors is None else [u, priors]
    packed = with_backward(forward, backward, inputs)
    return packed[..., :dim], packed[..., dim:]
