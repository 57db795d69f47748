"""Backend-specific timing helpers for benchmarks (not library code)."""

import statistics
import time

import keras
import numpy as np


def grad_step(loss_fn, jit=True):
    """Returns `step(x) -> (loss, dloss/dx)` compiled for the current backend.

    TF: `tf.function(jit_compile=True)` around a GradientTape; JAX:
    `jax.jit(jax.value_and_grad)`; torch: eager autograd (`jit` ignored).
    """
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def step(x):
            with tf.GradientTape() as tape:
                tape.watch(x)
                loss = loss_fn(x)
            return loss, tape.gradient(loss, x)

        return tf.function(step, jit_compile=jit) if jit else step
    if backend == "jax":
        import jax

        step = jax.value_and_grad(loss_fn)
        return jax.jit(step) if jit else step
    import torch

    def step(x):
        x = x.detach().requires_grad_(True)
        loss = loss_fn(x)
        (g,) = torch.autograd.grad(loss, [x])
        return loss, g

    return step


def block(x):
    """Waits for asynchronous backends (JAX dispatch) to finish `x`."""
    return keras.ops.convert_to_numpy(x)


def time_fn(fn, *args, warmup=2, repeats=10):
    """Median and minimum wall time in ms of `fn(*args)` after warm-up."""
    for _ in range(warmup):
        block(fn(*args)[0])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        block(fn(*args)[0])
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def random_tensor(shape, seed=0):
    return keras.ops.convert_to_tensor(
        np.random.default_rng(seed).normal(size=shape).astype("float32")
    )
