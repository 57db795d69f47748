"""Backend-specific helpers for the benchmarks' workers (not library code);
timing is in harness.py."""

import keras
import numpy as np


def grad_step(loss_fn, jit=True):
    """Returns `step(*args) -> (loss, gradients)`, the gradients of
    `loss_fn(*args)` with respect to every argument (one tensor for one
    argument, else a tuple), compiled for the current backend.

    TF: `tf.function(jit_compile=True)` around a GradientTape; JAX:
    `jax.jit(jax.value_and_grad)`; torch: eager autograd (`jit` ignored).
    """
    backend = keras.backend.backend()

    def unpack(grads):
        return grads[0] if len(grads) == 1 else tuple(grads)

    if backend == "tensorflow":
        import tensorflow as tf

        def step(*args):
            with tf.GradientTape() as tape:
                tape.watch(args)
                loss = loss_fn(*args)
            return loss, unpack(tape.gradient(loss, list(args)))

        return tf.function(step, jit_compile=jit) if jit else step
    if backend == "jax":
        import jax

        def step(*args):
            loss, grads = jax.value_and_grad(loss_fn, argnums=tuple(range(len(args))))(*args)
            return loss, unpack(grads)

        return jax.jit(step) if jit else step
    import torch

    def step(*args):
        args = [a.detach().requires_grad_(True) for a in args]
        loss = loss_fn(*args)
        return loss, unpack(torch.autograd.grad(loss, args))

    return step


def random_tensor(shape, seed=0):
    return keras.ops.convert_to_tensor(
        np.random.default_rng(seed).normal(size=shape).astype("float32")
    )
