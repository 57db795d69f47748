"""Hand-written plain-TensorFlow routers: the baselines of benchmarks/routing.py.

The same math as the library's routers (see their docstrings and the
float64 references in tests/reference/), written the way a TensorFlow user
would: `tf` einsums under `tf.function(jit_compile=True)`, on votes
transposed to the parent-major `(batch, out, in, dim)` layout where that is
faster with XLA on CPU than einsums on `(batch, in, out, dim)` (all but
self-routing). `ROUTERS[class name](config, weights)` returns
`route(votes) -> (poses, activations)` for the router's `get_config()` and
its weights `{name: numpy array}`; `activations=None` (all children active).
"""

import math

import harness
import tensorflow as tf


def _parent_major(votes):
    return tf.transpose(votes, (0, 2, 1, 3))


def _weighted_sum(c, u):
    return tf.einsum("bji,bjid->bjd", c, u)


def _dot(u, v):
    return tf.einsum("bjid,bjd->bji", u, v)


def _norm(x, epsilon=1e-7):
    return tf.sqrt(tf.reduce_sum(x * x, axis=-1) + epsilon)


def _squash(s, epsilon=1e-7):
    n2 = tf.reduce_sum(s * s, axis=-1, keepdims=True)
    return n2 / (1.0 + n2) * s / tf.sqrt(n2 + epsilon)


def _efficient_squash(s, epsilon=1e-7):
    n = tf.sqrt(tf.reduce_sum(s * s, axis=-1, keepdims=True) + epsilon)
    return (1.0 - tf.exp(-n)) * s / n


def _layer_norm(x, scale, offset, epsilon=1e-5):
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    var = tf.reduce_mean(tf.square(x - mean), axis=-1, keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + epsilon) * scale + offset


def _array(weights, name):
    return tf.constant(weights[name], tf.float32)


def dynamic(config, weights):
    if config["agreement"] != "dot":
        raise NotImplementedError("the pure baseline implements agreement='dot'")
    iterations, temperature = config["iterations"], config["temperature"]
    step_size, stop = config["step_size"], config["stop_gradient"]

    def route(votes):
        out_caps = votes.shape[2]
        u = _parent_major(votes)
        early = tf.stop_gradient(u) if stop else u
        logits = None
        for r in range(iterations):
            last = r == iterations - 1
            uu = u if last else early
            if logits is None:
                s = tf.reduce_sum(uu, axis=2) / out_caps  # softmax(0) is uniform
            else:
                s = _weighted_sum(tf.nn.softmax(logits / temperature, axis=1), uu)
            v = _squash(s)
            if not last:
                update = _dot(uu, v) * step_size
                logits = update if logits is None else logits + update
        return v, _norm(v)

    return route


def _agreement_logits(u, temperature):
    return _dot(u, tf.reduce_sum(u, axis=2)) / (math.sqrt(u.shape[-1]) * temperature)


def self_attention(config, weights):
    temperature = config["temperature"]
    priors = tf.transpose(_array(weights, "priors")) if config["use_priors"] else None

    def route(votes):
        u = _parent_major(votes)
        c = tf.nn.softmax(_agreement_logits(u, temperature), axis=1)
        if priors is not None:
            c = c + priors
        poses = _efficient_squash(_weighted_sum(c, u))
        return poses, _norm(poses)

    return route


def _sparsemax(z, axis):
    """Martins & Astudillo (2016); autodiff through the sort gives its Jacobian."""
    n = z.shape[axis]
    z_sorted = tf.sort(z, axis=axis, direction="DESCENDING")
    shape = [1] * len(z.shape)
    shape[axis] = n
    k = tf.reshape(tf.range(1, n + 1, dtype=z.dtype), shape)
    support = tf.cast(1 + k * z_sorted > tf.cumsum(z_sorted, axis=axis), z.dtype)
    k_z = tf.reduce_sum(support, axis=axis, keepdims=True)
    tau = (tf.reduce_sum(z_sorted * support, axis=axis, keepdims=True) - 1) / k_z
    return tf.maximum(z - tau, 0.0)


def _top_k_softmax(z, k):
    """Over the last axis."""
    kth = tf.math.top_k(z, k).values[..., k - 1 :]
    return tf.nn.softmax(tf.where(z >= kth, z, float("-inf")), axis=-1)


def sparse_attention(config, weights):
    temperature, top_k = config["temperature"], config["top_k"]

    def route(votes):
        u = _parent_major(votes)
        logits = _agreement_logits(u, temperature)
        if top_k is None:
            c = _sparsemax(logits, axis=1)
        else:
            c = tf.transpose(_top_k_softmax(tf.transpose(logits, (0, 2, 1)), top_k), (0, 2, 1))
        poses = _squash(_weighted_sum(c, u))
        return poses, _norm(poses)

    return route


def inverted_dot_product(config, weights):
    iterations, temperature = config["iterations"], config["temperature"]
    scale, offset = _array(weights, "scale"), _array(weights, "offset")

    def route(votes):
        out_caps, dim = votes.shape[2], votes.shape[3]
        u = _parent_major(votes)
        s = tf.reduce_sum(u, axis=2) / out_caps
        v = _layer_norm(s, scale, offset)
        for _ in range(iterations - 1):
            c = tf.nn.softmax(_dot(u, v) / (math.sqrt(dim) * temperature), axis=1)
            s = _weighted_sum(c, u)
            v = _layer_norm(s, scale, offset)
        # Activations: the squashed length of the last sum, n2 / (1 + n2).
        n2 = tf.reduce_sum(s * s, axis=-1)
        return v, n2 / (1.0 + n2)

    return route


def self_routing(config, weights):
    kernel = _array(weights, "routing_kernel")  # (I, J, D)
    bias = _array(weights, "routing_bias")  # (I, J)

    def route(votes):
        # Child-major: XLA fuses the multiply-and-sum; no transpose needed.
        in_caps = votes.shape[1]
        r = tf.nn.softmax(tf.reduce_sum(votes * kernel, axis=-1) + bias, axis=-1)
        mass = tf.reduce_sum(r, axis=1)
        poses = tf.einsum("bij,bijd->bjd", r, votes) / (mass[..., None] + 1e-7)
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
        r = tf.fill((batch, out_caps, in_caps), 1.0 / out_caps)
        for t, lam in enumerate(lambdas):
            r_sum = tf.reduce_sum(r, axis=2) + 1e-7  # all children active: a_in = 1
            mu = _weighted_sum(r, u) / r_sum[..., None]
            sq_dev = tf.square(u - mu[:, :, None])
            var = _weighted_sum(r, sq_dev) / r_sum[..., None] + epsilon
            log_var = tf.math.log(var)
            cost = tf.reduce_sum(beta_u + 0.5 * log_var, axis=-1) * (r_sum * out_caps / in_caps)
            logits = lam * (beta_a - cost)
            a_out = tf.sigmoid(logits)
            if t < iterations - 1:
                log_p = -0.5 * _dot(sq_dev, 1.0 / var)
                log_norm = tf.reduce_sum(log_var + math.log(2 * math.pi), -1, keepdims=True)
                log_p = log_p - 0.5 * log_norm
                r = tf.nn.softmax(tf.math.log_sigmoid(logits)[..., None] + log_p, axis=1)
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
    return tf.reduce_sum(poses * poses) + tf.reduce_sum(activations)
