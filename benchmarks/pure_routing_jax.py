"""Hand-written plain-JAX routers: the baselines of benchmarks/routing.py.

The same math as the library's routers (see their docstrings and the
float64 references in tests/reference/), written the way a JAX user would:
`jnp` einsums under `jax.jit`, on votes transposed to the parent-major
`(batch, out, in, dim)` layout where that is faster with XLA on CPU than
einsums on `(batch, in, out, dim)` (all but self-routing).
`ROUTERS[class name](config, weights)` returns `route(votes) -> (poses,
activations)` for the router's `get_config()` and its
weights `{name: numpy array}`; `activations=None` (all children active).
"""

import math

import harness
import jax
import jax.numpy as jnp


def _parent_major(votes):
    return jnp.swapaxes(votes, 1, 2)


def _weighted_sum(c, u):
    return jnp.einsum("bji,bjid->bjd", c, u)


def _dot(u, v):
    return jnp.einsum("bjid,bjd->bji", u, v)


def _norm(x, epsilon=1e-7):
    return jnp.sqrt(jnp.sum(x * x, axis=-1) + epsilon)


def _squash(s, epsilon=1e-7):
    n2 = jnp.sum(s * s, axis=-1, keepdims=True)
    return n2 / (1.0 + n2) * s / jnp.sqrt(n2 + epsilon)


def _efficient_squash(s, epsilon=1e-7):
    n = jnp.sqrt(jnp.sum(s * s, axis=-1, keepdims=True) + epsilon)
    return (1.0 - jnp.exp(-n)) * s / n


def _layer_norm(x, scale, offset, epsilon=1e-5):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + epsilon) * scale + offset


def _array(weights, name):
    return jnp.asarray(weights[name], jnp.float32)


def dynamic(config, weights):
    if config["agreement"] != "dot":
        raise NotImplementedError("the pure baseline implements agreement='dot'")
    iterations, temperature = config["iterations"], config["temperature"]
    step_size, stop = config["step_size"], config["stop_gradient"]

    def route(votes):
        out_caps = votes.shape[2]
        u = _parent_major(votes)
        early = jax.lax.stop_gradient(u) if stop else u
        logits = None
        for r in range(iterations):
            last = r == iterations - 1
            uu = u if last else early
            if logits is None:
                s = jnp.sum(uu, axis=2) / out_caps  # softmax(0) is uniform
            else:
                s = _weighted_sum(jax.nn.softmax(logits / temperature, axis=1), uu)
            v = _squash(s)
            if not last:
                update = _dot(uu, v) * step_size
                logits = update if logits is None else logits + update
        return v, _norm(v)

    return route


def _agreement_logits(u, temperature):
    return _dot(u, jnp.sum(u, axis=2)) / (math.sqrt(u.shape[-1]) * temperature)


def self_attention(config, weights):
    temperature = config["temperature"]
    priors = _array(weights, "priors").T if config["use_priors"] else None

    def route(votes):
        u = _parent_major(votes)
        c = jax.nn.softmax(_agreement_logits(u, temperature), axis=1)
        if priors is not None:
            c = c + priors
        poses = _efficient_squash(_weighted_sum(c, u))
        return poses, _norm(poses)

    return route


def _sparsemax(z, axis):
    """Martins & Astudillo (2016); autodiff through the sort gives its Jacobian."""
    n = z.shape[axis]
    z_sorted = -jnp.sort(-z, axis=axis)
    shape = [1] * z.ndim
    shape[axis] = n
    k = jnp.arange(1, n + 1, dtype=z.dtype).reshape(shape)
    cumsum = jnp.cumsum(z_sorted, axis=axis)
    k_z = jnp.sum(1 + k * z_sorted > cumsum, axis=axis, keepdims=True)
    tau = (jnp.take_along_axis(cumsum, k_z - 1, axis=axis) - 1) / k_z
    return jnp.maximum(z - tau, 0.0)


def _top_k_softmax(z, k):
    """Over the last axis."""
    kth = jax.lax.top_k(z, k)[0][..., k - 1 :]
    return jax.nn.softmax(jnp.where(z >= kth, z, -jnp.inf), axis=-1)


def sparse_attention(config, weights):
    temperature, top_k = config["temperature"], config["top_k"]

    def route(votes):
        u = _parent_major(votes)
        logits = _agreement_logits(u, temperature)
        if top_k is None:
            c = _sparsemax(logits, axis=1)
        else:
            c = jnp.swapaxes(_top_k_softmax(jnp.swapaxes(logits, 1, 2), top_k), 1, 2)
        poses = _squash(_weighted_sum(c, u))
        return poses, _norm(poses)

    return route


def inverted_dot_product(config, weights):
    iterations, temperature = config["iterations"], config["temperature"]
    scale, offset = _array(weights, "scale"), _array(weights, "offset")

    def route(votes):
        out_caps, dim = votes.shape[2], votes.shape[3]
        u = _parent_major(votes)
        s = jnp.sum(u, axis=2) / out_caps
        v = _layer_norm(s, scale, offset)
        for _ in range(iterations - 1):
            c = jax.nn.softmax(_dot(u, v) / (math.sqrt(dim) * temperature), axis=1)
            s = _weighted_sum(c, u)
            v = _layer_norm(s, scale, offset)
        # Activations: the squashed length of the last sum, n2 / (1 + n2).
        n2 = jnp.sum(s * s, axis=-1)
        return v, n2 / (1.0 + n2)

    return route


def self_routing(config, weights):
    kernel = _array(weights, "routing_kernel")  # (I, J, D)
    bias = _array(weights, "routing_bias")  # (I, J)

    def route(votes):
        # Child-major: XLA fuses the multiply-and-sum; no transpose needed.
        in_caps = votes.shape[1]
        r = jax.nn.softmax(jnp.sum(votes * kernel, axis=-1) + bias, axis=-1)
        mass = jnp.sum(r, axis=1)
        poses = jnp.einsum("bij,bijd->bjd", r, votes) / (mass[..., None] + 1e-7)
        return poses, mass / (in_caps + 1e-7)

    return route


def em(config, weights):
    iterations, epsilon = config["iterations"], config["epsilon"]
    lambdas = harness.em_inverse_temperatures(config)
    beta_u = _array(weights, "beta_u")[:, None]
    beta_a = _array(weights, "beta_a")

    def route(votes):
        batch, in_caps, out_caps, _ = votes.shape
        u = _parent_major(votes)  # (B, J, I, P)
        r = jnp.full((batch, out_caps, in_caps), 1.0 / out_caps, votes.dtype)
        for t, lam in enumerate(lambdas):
            r_sum = jnp.sum(r, axis=2) + 1e-7  # all children active: a_in = 1
            mu = _weighted_sum(r, u) / r_sum[..., None]
            sq_dev = jnp.square(u - mu[:, :, None])
            var = _weighted_sum(r, sq_dev) / r_sum[..., None] + epsilon
            log_var = jnp.log(var)
            cost = jnp.sum(beta_u + 0.5 * log_var, axis=-1) * (r_sum * out_caps / in_caps)
            logits = lam * (beta_a - cost)
            a_out = jax.nn.sigmoid(logits)
            if t < iterations - 1:
                log_p = -0.5 * _dot(sq_dev, 1.0 / var)
                log_p = log_p - 0.5 * jnp.sum(log_var + math.log(2 * math.pi), -1, keepdims=True)
                r = jax.nn.softmax(jax.nn.log_sigmoid(logits)[..., None] + log_p, axis=1)
        return mu, a_out

    return route


ROUTERS = {
    "DynamicRouting": dynamic,
    "SelfAttentionRouting": self_attention,
    "SparseAttentionRouting": sparse_attention,
    "InvertedDotProductRouting": inverted_dot_product,
    "SelfRouting": self_routing,
    "EMRouting": em,
}


def loss(outputs):
    poses, activations = outputs
    return jnp.sum(poses * poses) + jnp.sum(activations)
