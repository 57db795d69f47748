"""Sabour's CapsNet in plain JAX: the baseline of benchmarks/train_step.py.

Same math as `keras_capsules.models.CapsNet()` (see `capsnet_spec.py`):
parameters are a dict of arrays in Keras layouts (NHWC, HWIO); the train
step is one `jax.jit` of `jax.value_and_grad` and a hand-written Adam
(Keras's update rule and epsilon; optax is not a dependency), with the
parameters and optimiser state donated.

The strided primary-capsule convolution is, with `primary="matmul"` (the
default on CPU), 81 strided slices + one matmul: `lax.conv`'s input
gradient for it runs at ~1.3 GFLOP/s on XLA CPU (about 20x slower for the
whole step); `primary="conv"` (the default on GPU) is a plain `lax.conv`.
The first convolution (stride 1, one input channel, no input gradient) is
always a plain `lax.conv`.
"""

import functools

import jax
import jax.numpy as jnp
from capsnet_spec import ADAM, EPSILON, NUM_CLASSES, RECONSTRUCTION_WEIGHT, ROUTING_ITERATIONS


def squash(s):
    n2 = jnp.sum(s * s, axis=-1, keepdims=True)
    return s * (n2 / (1.0 + n2) / jnp.sqrt(n2 + EPSILON))


def default_primary():
    return "matmul" if jax.default_backend() == "cpu" else "conv"


def conv(x, kernel, strides):
    return jax.lax.conv_general_dilated(
        x, kernel, strides, "VALID", dimension_numbers=("NHWC", "HWIO", "NHWC")
    )


def features(params, images, primary="matmul"):
    """Images NHWC (B, 28, 28, 1) -> squashed primary capsules (B, 1152, 8)."""
    h = jax.nn.relu(conv(images, params["conv_kernel"], (1, 1)) + params["conv_bias"])
    if primary == "conv":
        p = conv(h, params["primary_kernel"], (2, 2))
    else:
        patches = jnp.concatenate(
            [h[:, dy : dy + 11 : 2, dx : dx + 11 : 2, :] for dy in range(9) for dx in range(9)], -1
        )
        p = patches @ params["primary_kernel"].reshape(-1, params["primary_kernel"].shape[-1])
    p = p + params["primary_bias"]  # (B, 6, 6, 256)
    return squash(p.reshape(p.shape[0], -1, 8))


def forward(params, images, primary="matmul"):
    """-> class capsules (B, 10, 16) and their lengths (B, 10)."""
    u = features(params, images, primary)
    votes = jnp.einsum("bid,ijde->bjie", u, params["capsule_kernel"])  # parent-major
    v = squash(jnp.sum(votes, axis=2) / NUM_CLASSES)  # softmax(0) is uniform
    logits = None
    for _ in range(ROUTING_ITERATIONS - 1):
        update = jnp.einsum("bjid,bjd->bji", votes, v)
        logits = update if logits is None else logits + update
        c = jax.nn.softmax(logits, axis=1)
        v = squash(jnp.einsum("bji,bjid->bjd", c, votes))
    return v, jnp.sqrt(jnp.sum(v * v, axis=-1) + EPSILON)


def decode(params, masked):
    h = masked
    for i in (1, 2, 3):
        h = h @ params[f"dense{i}_kernel"] + params[f"dense{i}_bias"]
        h = jax.nn.relu(h) if i < 3 else jax.nn.sigmoid(h)
    return h


def loss_fn(params, images, labels, primary="matmul"):
    """Margin loss + 0.392 x reconstruction MSE; `labels` integer (B,)."""
    v, scores = forward(params, images, primary)
    onehot = jax.nn.one_hot(labels, NUM_CLASSES, dtype=v.dtype)
    margin = jnp.mean(
        jnp.sum(
            onehot * jax.nn.relu(0.9 - scores) ** 2
            + 0.5 * (1.0 - onehot) * jax.nn.relu(scores - 0.1) ** 2,
            axis=-1,
        )
    )
    decoded = decode(params, (v * onehot[..., None]).reshape(v.shape[0], -1))
    mse = jnp.mean((decoded - images.reshape(images.shape[0], -1)) ** 2)
    return margin + RECONSTRUCTION_WEIGHT * mse


def init_adam(params):
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    return {
        "m": zeros,
        "v": jax.tree_util.tree_map(jnp.zeros_like, params),
        "step": jnp.zeros((), jnp.float32),
    }


def adam_update(params, grads, state):
    """Keras's Adam: m, v moving averages; lr * sqrt(1 - b2^t) / (1 - b1^t)."""
    b1, b2, eps = ADAM["beta_1"], ADAM["beta_2"], ADAM["epsilon"]
    t = state["step"] + 1.0
    alpha = ADAM["learning_rate"] * jnp.sqrt(1.0 - b2**t) / (1.0 - b1**t)
    m = jax.tree_util.tree_map(lambda m, g: m + (g - m) * (1.0 - b1), state["m"], grads)
    v = jax.tree_util.tree_map(lambda v, g: v + (g * g - v) * (1.0 - b2), state["v"], grads)
    params = jax.tree_util.tree_map(
        lambda p, m, v: p - alpha * m / (jnp.sqrt(v) + eps), params, m, v
    )
    return params, {"m": m, "v": v, "step": t}


def _train_step(params, state, images, labels, primary):
    loss, grads = jax.value_and_grad(loss_fn)(params, images, labels, primary)
    params, state = adam_update(params, grads, state)
    return params, state, loss


def make_train_step(primary=None):
    """`step(params, adam_state, images, labels) -> (params, adam_state, loss)`,
    jitted, parameters and state donated."""
    step = functools.partial(_train_step, primary=primary or default_primary())
    return jax.jit(step, donate_argnums=(0, 1))


def to_params(weights):
    """NumPy weights (capsnet_spec names, Keras layouts) -> device arrays."""
    return {k: jnp.asarray(v) for k, v in weights.items()}
