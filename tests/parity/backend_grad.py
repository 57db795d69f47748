"""Forward values and input gradients of a parity case on the current backend."""

import keras
import numpy as np

from tests.test_case import gradients, to_numpy


def to_tensors(arrays, dtype="float32"):
    """{name: array} -> {name: tensor}; integer arrays become int32."""
    return {
        k: keras.ops.convert_to_tensor(
            np.asarray(v).astype(
                np.int32 if np.issubdtype(np.asarray(v).dtype, np.integer) else dtype
            )
        )
        for k, v in arrays.items()
    }


def outputs_and_grads(case, layer, arrays):
    """Returns (outputs, {name: grad}) of a parity case as float64 arrays."""
    tensors = to_tensors(arrays)
    forward = case.forward
    if keras.backend.backend() == "jax":
        import jax

        # One XLA program instead of one compile per primitive and shape
        # (the JAX worker: 157 s -> 81 s); the gradients are jitted too.
        forward = jax.jit(case.forward, static_argnums=0)
    outputs = [to_numpy(o) for o in forward(layer, tensors)]
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
