"""Forward values and input gradients with the current backend's autodiff.

Test-only code: the library never imports a backend, tests may.
"""

import keras
import numpy as np


def to_numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x), dtype=np.float64)


def to_tensors(arrays, dtype="float32"):
    """{name: array} -> {name: tensor}; integer arrays become int32."""
    return {
        k: keras.ops.convert_to_tensor(
            np.asarray(v).astype(np.int32 if np.issubdtype(np.asarray(v).dtype, np.integer) else dtype)
        )
        for k, v in arrays.items()
    }


def gradients(loss_fn, tensors, diff):
    """Gradients of the scalar `loss_fn(tensors)` w.r.t. `tensors[k]`, k in diff.

    Unconnected inputs get zero gradients.
    """
    return _GRADS[keras.backend.backend()](loss_fn, dict(tensors), tuple(diff))


def outputs_and_grads(case, layer, arrays):
    """Returns (outputs, {name: grad}) of a parity case as float64 arrays."""
    tensors = to_tensors(arrays)
    outputs = [to_numpy(o) for o in case.forward(layer, tensors)]
    if not case.diff:
        return outputs, {}
    cotangents = [
        keras.ops.convert_to_tensor(c.astype(np.float32))
        for c in case.cotangents([o.shape for o in outputs])
    ]

    def loss_fn(t):
        outs = case.forward(layer, t)
        return sum(keras.ops.sum(o * c) for o, c in zip(outs, cotangents))

    grads = gradients(loss_fn, tensors, case.diff)
    return outputs, {k: to_numpy(g) for k, g in grads.items()}


def _tf_grads(loss_fn, tensors, diff):
    import tensorflow as tf

    with tf.GradientTape() as tape:
        for k in diff:
            tape.watch(tensors[k])
        loss = loss_fn(tensors)
    grads = tape.gradient(loss, [tensors[k] for k in diff])
    return {k: tf.zeros_like(tensors[k]) if g is None else g for k, g in zip(diff, grads)}


def _torch_grads(loss_fn, tensors, diff):
    import torch

    for k in diff:
        tensors[k] = tensors[k].detach().clone().requires_grad_(True)
    loss = loss_fn(tensors)
    grads = torch.autograd.grad(loss, [tensors[k] for k in diff], allow_unused=True)
    return {
        k: torch.zeros_like(tensors[k]) if g is None else g.detach()
        for k, g in zip(diff, grads)
    }


def _jax_grads(loss_fn, tensors, diff):
    import jax

    def f(diff_values):
        return loss_fn({**tensors, **diff_values})

    # Jitted: one XLA program per case instead of one compile per primitive
    # and shape (the JAX parity worker: 286 s -> 179 s).
    return jax.jit(jax.grad(f))({k: tensors[k] for k in diff})


_GRADS = {"tensorflow": _tf_grads, "torch": _torch_grads, "jax": _jax_grads}
