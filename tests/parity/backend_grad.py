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
    if keras.backend.backend() == "jax":
        return _jax_outputs_and_grads(case, layer, tensors)
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


def _jax_outputs_and_grads(case, layer, tensors):
    """On JAX, the outputs and the gradients (a vector-Jacobian product with
    the cotangents) come from one XLA program: compiling the forward and the
    gradient apart compiled the forward twice (the JAX worker: 41 s -> 25 s
    with the tests' XLA flags; op by op it took 157 s)."""
    import jax

    if not case.diff:
        return [to_numpy(o) for o in jax.jit(case.forward, static_argnums=0)(layer, tensors)], {}
    fixed = {k: v for k, v in tensors.items() if k not in case.diff}

    def forward(diff_values):
        return list(case.forward(layer, {**fixed, **diff_values}))

    diff_values = {k: tensors[k] for k in case.diff}
    # The cotangents' shapes are the outputs': traced, not computed.
    shapes = [o.shape for o in jax.eval_shape(forward, diff_values)]
    cotangents = [c.astype(np.float32) for c in case.cotangents(shapes)]

    @jax.jit
    def run(diff_values, cotangents):
        outputs, pullback = jax.vjp(forward, diff_values)
        return outputs, pullback(cotangents)[0]

    outputs, grads = run(diff_values, cotangents)
    return [to_numpy(o) for o in outputs], {k: to_numpy(g) for k, g in grads.items()}
